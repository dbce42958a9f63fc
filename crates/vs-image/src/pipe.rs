//! Writing through another thread: the caller produces bytes, a helper
//! thread pushes them through a writer (hashing, the file system). Used when
//! a core would otherwise sit idle, e.g. a rebuild that writes one layer.

use std::io::{self, Write};
use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender};

use crate::error::Error;

/// Bytes handed to the helper at a time.
const CHUNK: usize = 1 << 20;
/// Chunks in flight.
const DEPTH: usize = 4;

/// The caller's end: collects bytes into chunks and sends them.
struct PipeWriter<'a> {
    tx: &'a SyncSender<Vec<u8>>,
    /// Chunks the helper is done with, for reuse.
    free: &'a Receiver<Vec<u8>>,
    buf: Vec<u8>,
}

impl PipeWriter<'_> {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let next = self
            .free
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(CHUNK));
        let full = std::mem::replace(&mut self.buf, next);
        self.tx
            .send(full)
            .map_err(|_| io::Error::other("writer thread stopped"))
    }
}

impl Write for PipeWriter<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    /// Hands what is buffered to the helper (it does not wait for it).
    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// Runs `produce` with a writer whose bytes go, in order, through `w`
/// (which writes to `path`): directly, or — `helper` — on a helper thread.
/// Returns what `produce` returned and `w`.
///
/// On the helper thread `w` sees the same bytes in the same order, cut
/// differently, and one flush at the end instead of each flush `produce`
/// makes: only for writers whose output does not depend on either (hashing,
/// plain files), not for compressors.
pub(crate) fn write_through<W: Write + Send, T>(
    mut w: W,
    helper: bool,
    path: &Path,
    produce: impl FnOnce(&mut dyn Write) -> Result<T, Error>,
) -> Result<(T, W), Error> {
    if !helper {
        let out = produce(&mut w)?;
        return Ok((out, w));
    }
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(DEPTH);
    let (free_tx, free_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::scope(|scope| {
        let consumer = scope.spawn(move || -> io::Result<W> {
            // On an error `rx` is dropped and the producer's next send fails.
            for mut chunk in rx {
                w.write_all(&chunk)?;
                chunk.clear();
                let _ = free_tx.send(chunk);
            }
            w.flush()?;
            Ok(w)
        });
        let mut pipe = PipeWriter {
            tx: &tx,
            free: &free_rx,
            buf: Vec::with_capacity(CHUNK),
        };
        let out = produce(&mut pipe).and_then(|v| {
            pipe.send().map_err(|e| Error::io("write", path, e))?;
            Ok(v)
        });
        drop(pipe);
        drop(tx);
        let w = consumer
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("writer thread panicked")));
        // The consumer's own error explains a failed send: report it first.
        let w = w.map_err(|e| Error::io("write", path, e))?;
        Ok((out?, w))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn produce(w: &mut dyn Write) -> Result<usize, Error> {
        let io = |e| Error::io("write", "test", e);
        let mut n = 0;
        for i in 0..5000usize {
            let piece = vec![(i % 251) as u8; (i * 37) % 3000];
            w.write_all(&piece).map_err(io)?;
            n += piece.len();
            if i % 1000 == 0 {
                w.flush().map_err(io)?;
            }
        }
        Ok(n)
    }

    #[test]
    fn a_helper_thread_writes_the_same_bytes() {
        let p = Path::new("test");
        let (n1, direct) = write_through(Vec::new(), false, p, produce).unwrap();
        let (n2, helped) = write_through(Vec::new(), true, p, produce).unwrap();
        assert_eq!(n1, n2);
        assert_eq!(direct.len(), n1);
        assert_eq!(direct, helped);
    }

    struct Failing;
    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("disk full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_writers_error_is_reported() {
        let e = write_through(Failing, true, Path::new("test"), produce)
            .err()
            .unwrap();
        assert!(e.to_string().contains("disk full"), "{e}");
    }
}
