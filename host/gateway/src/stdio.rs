//! gatehouse's own stdin and stdout as the transport of one upstream
//! session, which ends the session's questions the moment its client goes
//! away.
//!
//! rmcp notices the end of stdin too, but then waits (up to 5 s) for the
//! requests still being handled before it lets go of what they wait on; a
//! `tools/call` whose server asked the person would hold the server's answer
//! and gatehouse's exit for that long. Here the first end of input (EOF or a
//! read error) disconnects the session from the people
//! ([`Upstream::disconnect`](super::Upstream::disconnect)) at once: what
//! waits for its person is answered `on_unhandled` and audited as the client
//! having gone.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use super::Gateway;

/// The transport of the upstream session on gatehouse's own stdin and
/// stdout (rmcp's [`stdio_pipes`](rmcp::transport::stdio_pipes): FIFOs on
/// the reactor, anything else through blocking reads), with the end of
/// stdin disconnecting `gateway`'s session.
///
/// ```no_run
/// # async fn run(gateway: gatehouse_gateway::Gateway) -> Result<(), Box<dyn std::error::Error>> {
/// use rmcp::ServiceExt;
/// let transport = gatehouse_gateway::stdio::transport(&gateway);
/// let service = gateway.serve(transport).await?;
/// service.waiting().await?;
/// # Ok(())
/// # }
/// ```
pub fn transport(
    gateway: &Gateway,
) -> (
    EndOfInput<rmcp::transport::io::StdioReader>,
    rmcp::transport::io::StdioWriter,
) {
    transport_then(gateway, || {})
}

/// [`transport`], with `first` run at the end of stdin before the session
/// is disconnected: what must not wait for the rest of the shutdown (the
/// `gatehouse` binary removes its control socket there, since a client may
/// kill its servers soon after closing their stdin).
pub fn transport_then(
    gateway: &Gateway,
    first: impl FnOnce() + Send + 'static,
) -> (
    EndOfInput<rmcp::transport::io::StdioReader>,
    rmcp::transport::io::StdioWriter,
) {
    let (reader, writer) = rmcp::transport::stdio_pipes();
    let disconnect = gateway.disconnector();
    let on_end = move || {
        first();
        disconnect();
    };
    (EndOfInput::new(reader, on_end), writer)
}

/// A reader that runs its callback once, at the first end of input: a read
/// that returns no bytes, or an error.
pub struct EndOfInput<R> {
    inner: R,
    on_end: Option<Box<dyn FnOnce() + Send>>,
}

impl<R> EndOfInput<R> {
    /// `inner`, calling `on_end` at its first end of input.
    pub fn new(inner: R, on_end: impl FnOnce() + Send + 'static) -> Self {
        EndOfInput {
            inner,
            on_end: Some(Box::new(on_end)),
        }
    }

    fn ended(&mut self) {
        if let Some(on_end) = self.on_end.take() {
            on_end();
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for EndOfInput<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let asked = buf.remaining() > 0;
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if asked && buf.filled().len() == before => self.ended(),
            Poll::Ready(Err(_)) => self.ended(),
            _ => {}
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn the_callback_runs_once_at_the_end_of_input_and_not_before() {
        let (mut writer, reader) = tokio::io::duplex(64);
        let ended = Arc::new(AtomicUsize::new(0));
        let counted = ended.clone();
        let mut reader = EndOfInput::new(reader, move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        writer.write_all(b"line\n").await.expect("write");
        let mut buf = [0u8; 16];
        assert_eq!(reader.read(&mut buf).await.expect("read"), 5);
        assert_eq!(ended.load(Ordering::SeqCst), 0, "data is not an end");
        // An empty buffer reads nothing without being an end.
        assert_eq!(reader.read(&mut []).await.expect("read"), 0);
        assert_eq!(ended.load(Ordering::SeqCst), 0);
        drop(writer);
        assert_eq!(reader.read(&mut buf).await.expect("read"), 0);
        assert_eq!(reader.read(&mut buf).await.expect("read"), 0);
        assert_eq!(ended.load(Ordering::SeqCst), 1, "once");
    }
}
