//! A shutdown signal that every task of a service can wait on.

use tokio::sync::watch;

/// Cloneable handle: `wait()` returns once shutdown was requested.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// Requests shutdown for every [`Shutdown`] made from it.
#[derive(Debug)]
pub struct ShutdownTrigger {
    tx: watch::Sender<bool>,
}

impl Shutdown {
    /// A trigger and its first handle.
    pub fn new() -> (ShutdownTrigger, Shutdown) {
        let (tx, rx) = watch::channel(false);
        (ShutdownTrigger { tx }, Shutdown { rx })
    }

    /// A handle that fires on Ctrl-C or SIGTERM: what every binary's
    /// `main` uses. Must be called inside a Tokio runtime.
    pub fn from_signals() -> Shutdown {
        let (trigger, shutdown) = Shutdown::new();
        trigger.on_signals();
        shutdown
    }

    /// A handle that never fires (for one-shot runs and tests).
    pub fn never() -> Shutdown {
        let (trigger, shutdown) = Shutdown::new();
        std::mem::forget(trigger);
        shutdown
    }

    /// True once shutdown was requested.
    pub fn is_requested(&self) -> bool {
        *self.rx.borrow()
    }

    /// Waits until shutdown is requested.
    pub async fn wait(&mut self) {
        // An error means every trigger is gone: treat it as a request.
        let _ = self.rx.wait_for(|requested| *requested).await;
    }
}

impl ShutdownTrigger {
    /// Requests shutdown.
    pub fn trigger(&self) {
        let _ = self.tx.send(true);
    }

    /// Triggers on Ctrl-C or SIGTERM, from a background task.
    pub fn on_signals(self) {
        tokio::spawn(async move {
            let ctrl_c = tokio::signal::ctrl_c();
            #[cfg(unix)]
            {
                let mut term =
                    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    {
                        Ok(s) => s,
                        Err(_) => {
                            let _ = ctrl_c.await;
                            self.trigger();
                            return;
                        }
                    };
                tokio::select! {
                    _ = ctrl_c => {},
                    _ = term.recv() => {},
                }
            }
            #[cfg(not(unix))]
            let _ = ctrl_c.await;
            tracing::info!("shutdown requested");
            self.trigger();
        });
    }
}
