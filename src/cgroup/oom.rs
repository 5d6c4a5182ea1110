//! OOM-kill notification for the event loop, without threads: a descriptor mio polls.

use super::{keyed_value, CgroupError};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// An armed OOM notification. Register [`OomWatch::as_raw_fd`] with mio (`SourceFd`) for
/// [`OomWatch::interest`]; on each event call [`OomWatch::drain`].
#[derive(Debug)]
pub struct OomWatch {
    source: Source,
    /// The file the `oom_kill` counter is read from.
    counter: PathBuf,
    /// The counter at the last drain (or at arming).
    last: u64,
}

#[derive(Debug)]
enum Source {
    /// v2 `memory.events`: "a value change in this file generates a file modified event"
    /// (cgroup-v2.rst, "memory.events"), which poll(2) reports as POLLPRI.
    V2 { events: File },
    /// v1: an eventfd the kernel signals on OOM, armed by writing "<eventfd> <fd of
    /// memory.oom_control>" to `cgroup.event_control` (cgroup-v1/memory.rst, "10. OOM
    /// Control"). The kernel also signals it when the cgroup is removed. `oom_control` stays
    /// open: it is the file the counter is read from.
    V1 { eventfd: EventFd, oom_control: File },
}

fn open_read(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
}

/// Read a whole (small) kernfs file from offset 0 through an open descriptor. Reading is also
/// what re-arms kernfs poll: it records the event count the reader has seen.
fn read_from_start(file: &File) -> io::Result<String> {
    let mut text = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = file.read_at(&mut buf, text.len() as u64)?;
        if n == 0 {
            break;
        }
        text.extend_from_slice(&buf[..n]);
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}

impl OomWatch {
    pub(super) fn v2(memory_events: &Path) -> Result<OomWatch, CgroupError> {
        let err = |source| CgroupError::OomWatch {
            path: memory_events.to_path_buf(),
            source,
        };
        let events = open_read(memory_events).map_err(err)?;
        let mut watch = OomWatch {
            source: Source::V2 { events },
            counter: memory_events.to_path_buf(),
            last: 0,
        };
        watch.last = watch.read_counter()?;
        Ok(watch)
    }

    pub(super) fn v1(memory_dir: &Path) -> Result<OomWatch, CgroupError> {
        let oom_path = memory_dir.join("memory.oom_control");
        let control = memory_dir.join("cgroup.event_control");
        let oom_control = open_read(&oom_path).map_err(|source| CgroupError::OomWatch {
            path: oom_path.clone(),
            source,
        })?;
        let eventfd =
            EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(|errno| CgroupError::OomWatch {
                    path: control.clone(),
                    source: io::Error::from(errno),
                })?;
        let registration = format!("{} {}", eventfd.as_raw_fd(), oom_control.as_raw_fd());
        super::CgroupFs::write(&super::RealFs, &control, &registration).map_err(|source| {
            CgroupError::OomWatch {
                path: control.clone(),
                source,
            }
        })?;
        let mut watch = OomWatch {
            source: Source::V1 {
                eventfd,
                oom_control,
            },
            counter: oom_path,
            last: 0,
        };
        watch.last = watch.read_counter()?;
        Ok(watch)
    }

    /// What to register for: `PRIORITY` for v2's `memory.events`, `READABLE` for v1's eventfd.
    pub fn interest(&self) -> mio::Interest {
        match self.source {
            Source::V2 { .. } => mio::Interest::PRIORITY,
            Source::V1 { .. } => mio::Interest::READABLE,
        }
    }

    /// The `oom_kill` counter as of the last drain.
    pub fn oom_kills(&self) -> u64 {
        self.last
    }

    fn read_counter(&self) -> Result<u64, CgroupError> {
        let file = match &self.source {
            Source::V2 { events } => events,
            Source::V1 { oom_control, .. } => oom_control,
        };
        let text = read_from_start(file).map_err(|source| CgroupError::OomWatch {
            path: self.counter.clone(),
            source,
        })?;
        keyed_value(&text, "oom_kill").ok_or_else(|| CgroupError::Parse {
            path: self.counter.clone(),
            content: text,
        })
    }

    /// Consume the notification and tell whether the `oom_kill` counter rose since the last
    /// call. Notifications also come for other changes (v2: `high`, `max` events; v1: the
    /// cgroup's removal), hence the counter.
    pub fn drain(&mut self) -> Result<bool, CgroupError> {
        if let Source::V1 { eventfd, .. } = &self.source {
            // One read resets an eventfd's counter (eventfd(2)); EAGAIN: nothing pending.
            match eventfd.read() {
                Ok(_) | Err(nix::errno::Errno::EAGAIN) => {}
                Err(errno) => {
                    return Err(CgroupError::OomWatch {
                        path: self.counter.clone(),
                        source: io::Error::from(errno),
                    })
                }
            }
        }
        let now = self.read_counter()?;
        let rose = now > self.last;
        self.last = now;
        Ok(rose)
    }
}

impl AsFd for OomWatch {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.source {
            Source::V2 { events } => events.as_fd(),
            Source::V1 { eventfd, .. } => eventfd.as_fd(),
        }
    }
}

impl AsRawFd for OomWatch {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}
