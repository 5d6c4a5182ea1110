//! PSI figures: the parse of a pressure file, and which file each figure comes from.

use super::super::testing::RecordingFs;
use super::super::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const CPU_FILE: &str = "some avg10=63.12 avg60=20.00 avg300=4.54 total=14173365\n\
                        full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";

#[test]
fn some_avg10_in_hundredths_of_a_percent() {
    assert_eq!(parse_some_avg10(CPU_FILE), Some(6312));
    assert_eq!(
        parse_some_avg10("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
        Some(0)
    );
    assert_eq!(
        parse_some_avg10("some avg10=100.00 avg60=1 total=9"),
        Some(10_000)
    );
    assert_eq!(parse_some_avg10("some avg10=7.5 total=1"), Some(750));
    assert_eq!(parse_some_avg10("some avg10=7 total=1"), Some(700));
    // "full" is not "some", whatever comes first.
    assert_eq!(
        parse_some_avg10("full avg10=9.00 total=1\nsome avg10=1.25 total=1\n"),
        Some(125)
    );
}

#[test]
fn malformed_pressure_files_are_no_figure() {
    for text in [
        "",
        "full avg10=1.00 total=1",
        "some avg60=1.00 total=1",
        "some avg10= total=1",
        "some avg10=x.00",
        "some avg10=1.234",
        "some avg10=-1.00",
        "some avg10=.5",
        "some avg10=100.01",
        "some avg10=99999999999.00",
    ] {
        assert_eq!(parse_some_avg10(text), None, "{text:?}");
    }
}

fn tree(fs: &Arc<RecordingFs>) -> Tree {
    let layout = Layout {
        mode: Mode::Hybrid,
        v2_base: PathBuf::from("/u"),
        v2_base_cgroup: PathBuf::from("/"),
        v1: vec![(V1Controller::Cpu, PathBuf::from("/v1/cpu"))],
        adopted: false,
        daemon_stays_in: None,
    };
    Tree::setup_with(fs.clone(), layout, "keel", 42).unwrap()
}

#[test]
fn the_trees_figures_first_the_hosts_where_they_are_missing() {
    let fs = RecordingFs::new();
    let tree = tree(&fs);
    fs.file("/u/keel/tasks/cpu.pressure", CPU_FILE);
    fs.file("/u/keel/tasks/memory.pressure", "some avg10=0.50 total=1\n");
    // The tree's io.pressure is absent (ENOENT): the host's figure stands in.
    fs.file(
        "/host/io",
        "some avg10=12.00 total=1\nfull avg10=3.00 total=1\n",
    );
    fs.file("/host/cpu", "some avg10=99.00 total=1\n");
    let pressure = tree.pressure_with_host(Path::new("/host"));
    assert_eq!(
        pressure,
        TreePressure {
            cpu: Some(PressureReading {
                some_avg10: 6312,
                source: PressureSource::Tree
            }),
            memory: Some(PressureReading {
                some_avg10: 50,
                source: PressureSource::Tree
            }),
            io: Some(PressureReading {
                some_avg10: 1200,
                source: PressureSource::Host
            }),
        }
    );
}

#[test]
fn unreadable_everywhere_is_no_figure() {
    let fs = RecordingFs::new();
    let tree = tree(&fs);
    // Cgroup PSI turned off (cgroup.pressure 0): the kernel refuses the read.
    fs.fail("/u/keel/tasks/cpu.pressure", libc::EOPNOTSUPP);
    fs.file("/host/cpu", "some avg10=2.00 total=1\n");
    // Garbage in the tree's file: the host's figure, not a wrong one.
    fs.file("/u/keel/tasks/memory.pressure", "nonsense\n");
    let pressure = tree.pressure_with_host(Path::new("/host"));
    assert_eq!(
        pressure.cpu,
        Some(PressureReading {
            some_avg10: 200,
            source: PressureSource::Host
        })
    );
    assert_eq!(pressure.memory, None);
    assert_eq!(pressure.io, None);
}
