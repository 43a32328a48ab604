//! Whether the host swaps: what decides if a freed instance's memory may be
//! reset in place.
//!
//! wasmtime 48 resets a pool slot in place by asking the kernel
//! (`PAGEMAP_SCAN`) for the pages an instance wrote that are *present*, and
//! restoring those. A written page that was swapped out meanwhile is
//! written but not present: it is neither restored nor decommitted, and the
//! next instance in that slot (another server's review, say) could read it.
//! So where swap is in use the sandbox does not reset in place: it
//! decommits freed memory, which is always correct, at some cost per review.

/// Where Linux lists the swap areas in use.
const SWAPS: &str = "/proc/swaps";

/// Whether any swap area is in use. When the list cannot be read, swap is
/// assumed: the safe answer.
fn in_use() -> bool {
    in_use_per(std::fs::read_to_string(SWAPS).ok().as_deref())
}

/// [`in_use`], saying so in a warning the first time it is true in this
/// process: a host makes several sandboxes (`gatehouse serve`: its own and the
/// conformance kit's two), and one warning is enough.
pub(crate) fn in_use_warned() -> bool {
    static WARNED: std::sync::Once = std::sync::Once::new();
    let swapping = in_use();
    if swapping {
        WARNED.call_once(|| {
            tracing::warn!(
                "swap is in use (/proc/swaps): freed review instances are decommitted rather than reset in place, so that no written page a review left can reach the next (reviews cost more; turn swap off for the gateway to avoid it)"
            );
        });
    }
    swapping
}

/// [`in_use`] for the text of `/proc/swaps` (a header line, then one line per
/// area), or `None` when it could not be read.
fn in_use_per(swaps: Option<&str>) -> bool {
    match swaps {
        Some(text) => text.lines().skip(1).any(|line| !line.trim().is_empty()),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_listed_area_or_an_unreadable_list_counts_as_swap() {
        let header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
        assert!(!in_use_per(Some(header)));
        assert!(!in_use_per(Some("")));
        assert!(in_use_per(Some(&format!(
            "{header}/dev/zram0                              partition\t4194300\t\t0\t\t100\n"
        ))));
        assert!(in_use_per(None));
    }
}
