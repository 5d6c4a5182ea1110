//! `keel add NAME`: a unit file validated (its name, its syntax, its repository, whether it
//! can ever fit) before it is installed in the units directory; nothing is started on error.

use crate::daemon::Daemon;
use crate::protocol::Response;

impl Daemon {
    /// `keel add`: validate, then install atomically into the units directory.
    pub(super) fn add_unit(&mut self, name: &str, text: &str) -> Response {
        if let Err(message) = crate::unit::validate_name(name) {
            return Response::Error { message };
        }
        let path = self.units.file_of(name);
        let lists = &self.settings.config.network.lists;
        // `after` entries name units this daemon has, with no cycle back to this one.
        let known: std::collections::BTreeMap<String, Vec<String>> = self
            .tasks
            .values()
            .filter(|t| t.name != name)
            .map(|t| {
                let after = t.unit.as_ref().map(|u| u.after.clone());
                (t.name.clone(), after.unwrap_or_default())
            })
            .collect();
        let unit = match crate::unit::parse_unit_with(&path, text, |unit| {
            let mut problems = crate::unit::network_list_problems(unit, lists);
            problems.extend(crate::unit::dependency_problems(name, unit, &known));
            problems
        }) {
            Ok(unit) => unit,
            Err(e) => {
                return Response::Error {
                    message: e.to_string(),
                }
            }
        };
        if let Some(repo) = &unit.repo {
            // A repository that is missing, not git, without the base, or a branch taken at
            // another commit: refused now, nothing started.
            if let Err(e) = crate::checkout::check(&self.store.dirs, name, repo) {
                return Response::Error {
                    message: format!("{name}: {e}"),
                };
            }
        }
        let reservation = crate::daemon::queue::Reservation::of(&unit.resources);
        if let Some(why) =
            crate::daemon::queue::never_fits(&reservation, &self.settings.config.capacity)
        {
            return Response::Error {
                message: format!("{name}: can never start: {why}"),
            };
        }
        if let Err(e) = crate::state::atomic_write(&path, text.as_bytes()) {
            return Response::Error {
                message: format!("cannot install the unit: {e}"),
            };
        }
        self.scan_units();
        Response::Ok {
            message: format!("{name}: installed as {}", path.display()),
        }
    }
}
