//! The listing digest of each group of a layer (recorded in the SBOM): the
//! sha256 of its entries' paths, modes, link targets and the sha256 of each
//! file's content as read for the layer.
//!
//! Hashing happens inline, or — when a core would otherwise sit idle, e.g.
//! a rebuild that writes one layer — on a helper thread fed in batches, so
//! the writer hashes only the layer itself.

use std::io::{self, Read};
use std::sync::mpsc::{Receiver, Sender, SyncSender};

use sha2::{Digest as _, Sha256};

use crate::{Digest, Error};

/// Where a layer writer sends listing pieces, in entry order.
pub(crate) trait ListingSink {
    /// Listing bytes of group `gi`.
    fn text(&mut self, gi: usize, t: &[u8]) -> io::Result<()>;
    /// Content of the file being written.
    fn data(&mut self, d: &[u8]) -> io::Result<()>;
    /// The file is complete: `f<sha256 of its content>\n` goes into the
    /// listing of group `gi`.
    fn file_end(&mut self, gi: usize) -> io::Result<()>;
}

/// Hashes on the calling thread.
struct Inline {
    groups: Vec<Sha256>,
    file: Sha256,
}

impl Inline {
    fn new(n: usize) -> Self {
        Self {
            groups: (0..n).map(|_| Sha256::new()).collect(),
            file: Sha256::new(),
        }
    }

    fn text(&mut self, gi: usize, t: &[u8]) {
        if let Some(g) = self.groups.get_mut(gi) {
            g.update(t);
        }
    }

    fn file_end(&mut self, gi: usize) {
        let d = Digest::from_hasher(std::mem::take(&mut self.file));
        self.text(gi, format!("f{}\n", d.hex()).as_bytes());
    }

    fn finish(self) -> Vec<Digest> {
        self.groups.into_iter().map(Digest::from_hasher).collect()
    }
}

impl ListingSink for Inline {
    fn text(&mut self, gi: usize, t: &[u8]) -> io::Result<()> {
        Inline::text(self, gi, t);
        Ok(())
    }
    fn data(&mut self, d: &[u8]) -> io::Result<()> {
        self.file.update(d);
        Ok(())
    }
    fn file_end(&mut self, gi: usize) -> io::Result<()> {
        Inline::file_end(self, gi);
        Ok(())
    }
}

/// One piece of a listing, as sent to the helper thread.
enum Piece {
    Text(usize, Vec<u8>),
    Data(Vec<u8>),
    FileEnd(usize),
}

/// Sends pieces to the helper thread in batches (a message per file would
/// cost a wake-up each); content buffers come back for reuse.
struct Batched<'a> {
    tx: &'a SyncSender<Vec<Piece>>,
    free: &'a Receiver<Vec<u8>>,
    batch: Vec<Piece>,
    bytes: usize,
}

const BATCH_BYTES: usize = 1 << 20;
const BATCH_PIECES: usize = 4096;

impl Batched<'_> {
    fn push(&mut self, bytes: usize) -> io::Result<()> {
        self.bytes += bytes;
        if self.bytes >= BATCH_BYTES || self.batch.len() >= BATCH_PIECES {
            self.flush()
        } else {
            Ok(())
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.bytes = 0;
        self.tx
            .send(std::mem::take(&mut self.batch))
            .map_err(|_| io::Error::other("listing hasher stopped"))
    }
}

impl ListingSink for Batched<'_> {
    fn text(&mut self, gi: usize, t: &[u8]) -> io::Result<()> {
        match self.batch.last_mut() {
            Some(Piece::Text(g, buf)) if *g == gi => buf.extend_from_slice(t),
            _ => self.batch.push(Piece::Text(gi, t.to_vec())),
        }
        self.push(t.len())
    }
    fn data(&mut self, d: &[u8]) -> io::Result<()> {
        match self.batch.last_mut() {
            Some(Piece::Data(buf)) => buf.extend_from_slice(d),
            _ => {
                let mut buf = self.free.try_recv().unwrap_or_default();
                buf.clear();
                buf.extend_from_slice(d);
                self.batch.push(Piece::Data(buf));
            }
        }
        self.push(d.len())
    }
    fn file_end(&mut self, gi: usize) -> io::Result<()> {
        self.batch.push(Piece::FileEnd(gi));
        self.push(0)
    }
}

/// The helper thread: hashes batches until the sender is dropped.
fn hash_batches(n: usize, rx: Receiver<Vec<Piece>>, free: Sender<Vec<u8>>) -> Vec<Digest> {
    let mut h = Inline::new(n);
    for piece in rx.into_iter().flatten() {
        match piece {
            Piece::Text(gi, t) => h.text(gi, &t),
            Piece::Data(d) => {
                h.file.update(&d);
                let _ = free.send(d);
            }
            Piece::FileEnd(gi) => h.file_end(gi),
        }
    }
    h.finish()
}

/// Runs `write` with a listing sink for `n` groups and returns its result
/// with the groups' listing digests. `helper`: hash on a helper thread.
pub(crate) fn with_listing<T>(
    n: usize,
    helper: bool,
    write: impl FnOnce(&mut dyn ListingSink) -> Result<T, Error>,
) -> Result<(T, Vec<Digest>), Error> {
    if !helper {
        let mut sink = Inline::new(n);
        let out = write(&mut sink)?;
        return Ok((out, sink.finish()));
    }
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Piece>>(4);
    let (free_tx, free_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let (out, digests) = std::thread::scope(|scope| {
        let hasher = scope.spawn(move || hash_batches(n, rx, free_tx));
        let mut sink = Batched {
            tx: &tx,
            free: &free_rx,
            batch: Vec::new(),
            bytes: 0,
        };
        let out = write(&mut sink).and_then(|v| {
            sink.flush()
                .map_err(|e| Error::io("hash the listing of", "layer", e))?;
            Ok(v)
        });
        drop(tx);
        (out, hasher.join())
    });
    let out = out?;
    match digests {
        Ok(d) if d.len() == n => Ok((out, d)),
        _ => Err(Error::io(
            "hash the listing of",
            "layer",
            io::Error::other("listing hasher failed"),
        )),
    }
}

/// A reader that passes what it reads on to a listing sink.
pub(crate) struct TeeReader<'a, R> {
    pub inner: R,
    pub sink: &'a mut dyn ListingSink,
}

impl<R: Read> Read for TeeReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.sink.data(&buf[..n])?;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn feed(sink: &mut dyn ListingSink) -> Result<(), Error> {
        let io = |e| Error::io("feed", "test", e);
        for i in 0..3000usize {
            let gi = i % 3;
            sink.text(gi, format!("p{i}\0644\0").as_bytes())
                .map_err(io)?;
            sink.data(&vec![i as u8; (i % 500) * 7]).map_err(io)?;
            sink.data(b"tail").map_err(io)?;
            sink.file_end(gi).map_err(io)?;
        }
        Ok(())
    }

    #[test]
    fn helper_thread_gives_the_same_digests() {
        let (_, inline) = with_listing(3, false, feed).unwrap();
        let (_, helper) = with_listing(3, true, feed).unwrap();
        assert_eq!(inline, helper);
    }
}
