//! Why a running task stops before its outcome: a user's cancel, or the worker letting go of
//! it (shutdown, lost lease). Every wait of the driver races against both.

use std::future::Future;

use tokio_util::sync::CancellationToken;

/// The reason a wait was cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    /// The task was cancelled (control message or CLI): it ends `cancelled`.
    Cancelled,
    /// The worker lets the task go (shutdown or lost lease): it stays resumable.
    Released,
}

/// The two tokens a task run watches.
#[derive(Debug, Clone, Default)]
pub struct Stops {
    pub cancel: CancellationToken,
    pub release: CancellationToken,
    /// A `pause`: the task stops before its next LLM call and waits (not an interrupt:
    /// what runs now finishes first).
    pub pause: CancellationToken,
    /// Guidance injected since the last recursion began (`inject`), oldest first.
    pub guidance: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Stops {
    /// Takes the guidance injected since the last call.
    pub fn take_guidance(&self) -> Vec<String> {
        self.guidance
            .lock()
            .map(|mut inbox| std::mem::take(&mut *inbox))
            .unwrap_or_default()
    }
}

impl Stops {
    /// Runs `future` unless a stop comes first. A cancel wins over a release.
    pub async fn guard<F: Future>(&self, future: F) -> Result<F::Output, Interrupt> {
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Err(Interrupt::Cancelled),
            () = self.release.cancelled() => Err(Interrupt::Released),
            output = future => Ok(output),
        }
    }

    /// A stop that already happened, if any.
    pub fn current(&self) -> Option<Interrupt> {
        if self.cancel.is_cancelled() {
            Some(Interrupt::Cancelled)
        } else if self.release.is_cancelled() {
            Some(Interrupt::Released)
        } else {
            None
        }
    }
}
