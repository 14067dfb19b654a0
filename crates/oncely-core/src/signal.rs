//! The process's shutdown signals, for [`crate::Consumer::run_until_signal`].

use tracing::warn;

/// Completes when the process gets Ctrl-C (SIGINT) or, on Unix, SIGTERM (what `docker stop`
/// and Kubernetes send). Pass it to an HTTP server's graceful shutdown, or cancel a
/// [`crate::CancellationToken`] with it. If a signal cannot be listened for, it says so at
/// WARN and waits for the other (or forever).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(e) => {
                warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
}
