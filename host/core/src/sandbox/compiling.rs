//! One compile per module at a time: loads of the same module (the same
//! sha256) that overlap share the compile the first of them started, rather
//! than each compiling it again.
//!
//! A reload that arrives while the first chain is still loading, or two
//! chains naming one module, would otherwise compile it twice at once: twice
//! the CPU, and twice the compile's peak memory (a few hundred MiB for a
//! JavaScript or Python module). The loads that join get the same compiled
//! module, or the same error; the compile that failed or panicked is not
//! remembered, so the next load tries again.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use wasmtime::component::Component;

/// The compiles running now, by module digest.
#[derive(Default)]
pub(crate) struct Compiling {
    running: Mutex<HashMap<String, Arc<Running>>>,
}

/// One running compile and, once it ends, its result.
#[derive(Default)]
struct Running {
    result: Mutex<Option<Result<Component, String>>>,
    ended: Condvar,
}

/// Whether a load compiled its module or joined a compile already running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Took {
    /// This load ran the compile.
    Compiled,
    /// This load waited for another load's compile of the same module.
    Joined,
}

impl Compiling {
    /// Runs `compile` for the module `digest`, unless a compile of it is
    /// already running; then waits for that compile and returns its result.
    pub(crate) fn once(
        &self,
        digest: &str,
        compile: impl FnOnce() -> wasmtime::Result<Component>,
    ) -> (wasmtime::Result<Component>, Took) {
        let (running, first) = {
            let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            match running.get(digest) {
                Some(compile) => (compile.clone(), false),
                None => {
                    let compile = Arc::new(Running::default());
                    running.insert(digest.to_owned(), compile.clone());
                    (compile, true)
                }
            }
        };
        if !first {
            return (running.wait(), Took::Joined);
        }
        // Ends the compile for the loads that joined it even if `compile`
        // panics, and lets the next load start a compile of its own.
        let ending = Ending {
            compiling: self,
            digest,
            running: &running,
        };
        let result = compile();
        ending.end(match &result {
            Ok(component) => Ok(component.clone()),
            Err(error) => Err(format!("{error:#}")),
        });
        (result, Took::Compiled)
    }

    /// How many compiles are running (for tests).
    #[cfg(test)]
    fn running(&self) -> usize {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Running {
    /// Waits for the compile's result.
    fn wait(&self) -> wasmtime::Result<Component> {
        let mut result = self.result.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(result) = &*result {
                return result.clone().map_err(wasmtime::Error::msg);
            }
            result = self
                .ended
                .wait(result)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Ends a running compile: removes it from the running ones and hands its
/// result to the loads waiting for it; dropped without a result (the compile
/// panicked), it hands them an error.
struct Ending<'a> {
    compiling: &'a Compiling,
    digest: &'a str,
    running: &'a Running,
}

impl Ending<'_> {
    fn end(self, result: Result<Component, String>) {
        // Never dropped: `finish` runs once, even if it were to panic.
        let ending = std::mem::ManuallyDrop::new(self);
        ending.finish(Some(result));
    }

    fn finish(&self, result: Option<Result<Component, String>>) {
        self.compiling
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(self.digest);
        let result = result.unwrap_or_else(|| {
            Err("the compile of this module ended in a panic (a bug in gatehouse or wasmtime); load it again".to_owned())
        });
        *self
            .running
            .result
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(result);
        self.running.ended.notify_all();
    }
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        self.finish(None);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// An empty component (its preamble alone), which compiles in no time.
    fn component(engine: &wasmtime::Engine) -> wasmtime::Result<Component> {
        Component::new(engine, b"\0asm\x0d\0\x01\0")
    }

    #[test]
    fn overlapping_loads_of_one_module_share_one_compile() {
        let engine = wasmtime::Engine::default();
        let compiling = Compiling::default();
        let compiles = AtomicUsize::new(0);
        let loads = 4;
        let started = Barrier::new(loads);
        let took: Vec<Took> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..loads)
                .map(|_| {
                    scope.spawn(|| {
                        started.wait();
                        let (result, took) = compiling.once("digest", || {
                            compiles.fetch_add(1, Ordering::SeqCst);
                            // Long enough for every other load to join.
                            std::thread::sleep(Duration::from_millis(300));
                            component(&engine)
                        });
                        assert!(result.is_ok(), "{result:?}");
                        took
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().expect("a load"))
                .collect()
        });
        assert_eq!(compiles.load(Ordering::SeqCst), 1);
        assert_eq!(
            took.iter().filter(|took| **took == Took::Compiled).count(),
            1
        );
        assert_eq!(compiling.running(), 0);
        // Ended: the next load compiles again.
        let (_, took) = compiling.once("digest", || component(&engine));
        assert_eq!(took, Took::Compiled);
    }

    #[test]
    fn different_modules_compile_side_by_side() {
        let engine = wasmtime::Engine::default();
        let compiling = Compiling::default();
        let inside = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for digest in ["a", "b"] {
                let (compiling, inside, engine) = (&compiling, &inside, &engine);
                scope.spawn(move || {
                    let (result, took) = compiling.once(digest, || {
                        // Both compiles must be running at once.
                        inside.fetch_add(1, Ordering::SeqCst);
                        let waited = std::time::Instant::now();
                        while inside.load(Ordering::SeqCst) < 2
                            && waited.elapsed() < Duration::from_secs(10)
                        {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        assert_eq!(inside.load(Ordering::SeqCst), 2, "the other compile waited");
                        component(engine)
                    });
                    assert!(result.is_ok());
                    assert_eq!(took, Took::Compiled);
                });
            }
        });
    }

    #[test]
    fn a_failed_or_panicking_compile_fails_its_joiners_and_is_not_remembered() {
        let engine = wasmtime::Engine::default();
        let compiling = Compiling::default();
        for panics in [false, true] {
            let joined = Barrier::new(2);
            std::thread::scope(|scope| {
                let first = scope.spawn(|| {
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        compiling.once("bad", || {
                            joined.wait();
                            // Let the other load join before this one ends.
                            std::thread::sleep(Duration::from_millis(300));
                            if panics {
                                panic!("the compile panics");
                            }
                            Err(wasmtime::Error::msg("not a component"))
                        })
                    }))
                });
                joined.wait();
                let (result, took) = compiling.once("bad", || component(&engine));
                let first = first.join().expect("the first load's thread");
                assert_eq!(took, Took::Joined);
                let error = result.expect_err("the joiner gets the compile's failure");
                if panics {
                    assert!(first.is_err(), "the compile's own panic propagates");
                    assert!(error.to_string().contains("panic"), "{error}");
                } else {
                    let (first, _) = first.expect("no panic");
                    assert!(first.is_err());
                    assert_eq!(error.to_string(), "not a component");
                }
            });
            assert_eq!(compiling.running(), 0);
            let (result, took) = compiling.once("bad", || component(&engine));
            assert_eq!(took, Took::Compiled, "a failure is not remembered");
            assert!(result.is_ok());
        }
    }
}
