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
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminated() => {}
    }
}

/// Resolves on SIGTERM (never elsewhere).
async fn terminated() {
    #[cfg(unix)]
    if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        s.recv().await;
        return;
    }
    std::future::pending::<()>().await
}

/// Sends () on the first signal; exits the process at once on the second.
pub fn forward_signals() -> tokio::sync::mpsc::UnboundedReceiver<()> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        signal().await;
        let _ = tx.send(());
        signal().await;
        eprintln!("second signal: exiting at once");
        std::process::exit(130);
    });
    rx
}
