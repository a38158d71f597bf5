//! What the process takes from its surroundings: tokens from files or
//! variables, and signals.

use crate::exit::Failure;
use std::path::PathBuf;

/// A token from a file, else from an environment variable (trimmed). A
/// file, or a set variable, holding nothing but whitespace is refused:
/// it would send (or, on a coordinator, accept) an empty token.
pub fn read_token(file: Option<&PathBuf>, var: &str) -> Result<Option<String>, Failure> {
    let (token, from) = match file {
        Some(f) => (
            std::fs::read_to_string(f).map_err(|e| {
                Failure::BadInput(format!("cannot read token file {}: {e}", f.display()))
            })?,
            format!("token file {}", f.display()),
        ),
        None => match std::env::var(var) {
            Ok(t) if !t.is_empty() => (t, var.to_string()),
            _ => return Ok(None),
        },
    };
    let token = token.trim().to_string();
    if token.is_empty() {
        return Err(Failure::BadInput(format!(
            "{from} is empty (or only whitespace): put the token in it, one line of at least {} \
             characters (make one with: head -c 32 /dev/urandom | base64)",
            nqueens_coordinator::server::MIN_TOKEN
        )));
    }
    Ok(Some(token))
}

/// Resolves on the next Ctrl-C or SIGTERM.
pub async fn signal() {
    Signals::new().recv().await
}

/// Ctrl-C (SIGINT) and SIGTERM, listened for from creation to drop: a
/// signal that arrives between two waits is kept for the next, where a
/// listener made afresh for each wait would miss it.
pub struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Listens from now on (inside a runtime).
    pub fn new() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Signals {
                interrupt: signal(SignalKind::interrupt()).ok(),
                terminate: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// The next signal (never, where none can be listened for).
    pub async fn recv(&mut self) {
        #[cfg(unix)]
        {
            async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                () = next(&mut self.interrupt) => {}
                () = next(&mut self.terminate) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

impl Default for Signals {
    fn default() -> Self {
        Signals::new()
    }
}

/// Sends () on the first signal; exits the process at once on the second.
pub fn forward_signals() -> tokio::sync::mpsc::UnboundedReceiver<()> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut signals = Signals::new();
    tokio::spawn(async move {
        signals.recv().await;
        let _ = tx.send(());
        signals.recv().await;
        say!("second signal: exiting at once");
        std::process::exit(130);
    });
    rx
}

/// Keeps Mesa's device-select Vulkan layer out of this process. The layer
/// opens the Wayland or X display to pick a default card, and with none
/// (a server, a container, CI) libwayland prints `error: XDG_RUNTIME_DIR is
/// invalid or not set in the environment.` twice on every command that
/// looks for a card, which reads as this program's error. Counting needs
/// no display, and orders the cards itself (`nqueens_gpu::adapters`). A
/// value the user set is kept. Called first in `main`, before any thread
/// that could read the environment starts.
pub fn quiet_vulkan_layers() {
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        // SAFETY: no other thread of this process reads the environment
        // yet (set first thing in `main`).
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
}
