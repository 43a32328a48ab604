//! Resident memory, as Linux reports it in `/proc`: this process's RSS and
//! peak RSS, resetting the peak (`/proc/self/clear_refs`), and another
//! process's peak RSS and run state. Elsewhere every reading is `None`.

/// This process's resident set size in bytes (`VmRSS`).
pub fn current_rss() -> Option<u64> {
    status_bytes("self", "VmRSS:")
}

/// This process's peak resident set size in bytes (`VmHWM`): since start, or
/// since the last reset.
pub fn peak_rss() -> Option<u64> {
    status_bytes("self", "VmHWM:")
}

/// Resets the peak to the current RSS, so that [`peak_rss`] covers what
/// follows; whether the kernel allowed it.
pub fn reset_peak_rss() -> bool {
    cfg!(target_os = "linux") && std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The peak RSS in bytes of a live process (`None` once it has exited: the
/// kernel drops the numbers with the address space).
pub(super) fn process_peak_rss(pid: u32) -> Option<u64> {
    status_bytes(&pid.to_string(), "VmHWM:")
}

/// Whether a process is asleep (state `S`: waiting, e.g. for its stdin).
pub(super) fn process_is_sleeping(pid: u32) -> bool {
    proc_file(&pid.to_string(), "stat").is_some_and(|stat| {
        // `pid (comm) S ...`; comm may hold spaces and parentheses.
        stat.rfind(')')
            .and_then(|end| stat.get(end + 1..))
            .and_then(|rest| rest.split_whitespace().next())
            == Some("S")
    })
}

fn status_bytes(process: &str, field: &str) -> Option<u64> {
    field_bytes(&proc_file(process, "status")?, field)
}

/// One `kB` field of a `/proc/PID/status` text, in bytes.
fn field_bytes(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with(field))?;
    let kib: u64 = line
        .get(field.len()..)?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

#[cfg(target_os = "linux")]
fn proc_file(process: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{process}/{file}")).ok()
}

#[cfg(not(target_os = "linux"))]
fn proc_file(_process: &str, _file: &str) -> Option<String> {
    None
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn own_readings_are_plausible() {
        assert!(current_rss().is_some_and(|rss| rss > 0));
        assert!(peak_rss().is_some_and(|peak| peak > 0));
        // The peak is at least the RSS only within one reading: between two
        // reads another test may reset the peak (`reset_peak_rss`) after
        // memory was freed, so compare the fields of one snapshot.
        let status = proc_file("self", "status").unwrap();
        let rss = field_bytes(&status, "VmRSS:").unwrap();
        let peak = field_bytes(&status, "VmHWM:").unwrap();
        assert!(rss > 0 && peak >= rss, "rss {rss}, peak {peak}");
        assert_eq!(process_peak_rss(u32::MAX), None);
    }

    #[test]
    fn a_child_is_seen_asleep_with_its_peak() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        while !process_is_sleeping(child.id()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let asleep = process_is_sleeping(child.id());
        let peak = process_peak_rss(child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(asleep);
        assert!(peak.is_some_and(|peak| peak > 0), "{peak:?}");
    }
}
