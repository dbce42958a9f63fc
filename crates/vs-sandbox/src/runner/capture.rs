//! Bounded capture of one output stream: keeps the first and the last bytes
//! within a fixed cap and counts what falls in between.

use serde::{Deserialize, Serialize};

use super::b64;

/// Accumulates a stream while keeping at most `head_cap + tail_cap` bytes:
/// the head in a plain buffer, the tail in a ring buffer (plain `memcpy`s,
/// so 10 GiB pass through quickly even in debug builds).
#[derive(Debug)]
pub struct HeadTail {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    /// Grows to `tail_cap`, then wraps at `ring_pos`.
    ring: Vec<u8>,
    /// Where the next byte goes once `ring` is full (the oldest byte).
    ring_pos: usize,
    total: u64,
}

impl HeadTail {
    /// A buffer keeping `cap` bytes in all: half for the head, the rest for the tail.
    pub fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        Self {
            head_cap,
            tail_cap: cap - head_cap,
            head: Vec::new(),
            ring: Vec::new(),
            ring_pos: 0,
            total: 0,
        }
    }

    /// Appends one chunk of the stream.
    pub fn push(&mut self, mut chunk: &[u8]) {
        self.total = self.total.saturating_add(chunk.len() as u64);
        if self.head.len() < self.head_cap {
            let (now, rest) = chunk.split_at((self.head_cap - self.head.len()).min(chunk.len()));
            self.head.extend_from_slice(now);
            chunk = rest;
        }
        if chunk.len() > self.tail_cap {
            chunk = chunk.split_at(chunk.len() - self.tail_cap).1;
        }
        if self.ring.len() < self.tail_cap {
            let (now, rest) = chunk.split_at((self.tail_cap - self.ring.len()).min(chunk.len()));
            if self.ring.capacity() == 0 && !now.is_empty() {
                self.ring.reserve_exact(self.tail_cap);
            }
            self.ring.extend_from_slice(now);
            chunk = rest;
        }
        if chunk.is_empty() {
            return;
        }
        // The ring is full and `chunk.len() <= tail_cap`: overwrite the oldest.
        let (to_end, wrapped) = chunk.split_at((self.tail_cap - self.ring_pos).min(chunk.len()));
        let end = self.ring_pos + to_end.len();
        if let Some(dst) = self.ring.get_mut(self.ring_pos..end) {
            dst.copy_from_slice(to_end);
        }
        if let Some(dst) = self.ring.get_mut(..wrapped.len()) {
            dst.copy_from_slice(wrapped);
        }
        self.ring_pos = (self.ring_pos + chunk.len()) % self.tail_cap;
    }

    /// The captured result.
    pub fn finish(mut self) -> CapturedOutput {
        self.ring.rotate_left(self.ring_pos);
        let split = self.head.len();
        let mut bytes = self.head;
        bytes.extend_from_slice(&self.ring);
        CapturedOutput::from_parts(bytes, split, self.total)
    }
}

/// A writer that keeps the first and last bytes of what it is given
/// within a fixed cap (as a runner's capture does): for a stream that
/// arrives from elsewhere (a job's output relayed by a broker).
#[derive(Debug)]
pub struct BoundedCapture(HeadTail);

impl BoundedCapture {
    /// A capture keeping `cap` bytes in all.
    pub fn new(cap: usize) -> Self {
        Self(HeadTail::new(cap))
    }

    /// What was written, bounded.
    pub fn finish(self) -> CapturedOutput {
        self.0.finish()
    }
}

impl std::io::Write for BoundedCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.push(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a command wrote to one stream, bounded: the first and last bytes
/// within the runner's cap, plus how many bytes in between were dropped.
///
/// When nothing was dropped, [`CapturedOutput::bytes`] is the whole stream.
///
/// In JSON it reads `{"total_bytes", "dropped_bytes", "encoding", "head",
/// "tail"}`: `encoding` is `"utf-8"` when head and tail are both valid UTF-8
/// (then they are plain strings) and `"base64"` otherwise (standard
/// alphabet, padded), so the JSON form is always lossless.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "CapturedOutputJson", try_from = "CapturedOutputJson")]
pub struct CapturedOutput {
    bytes: Vec<u8>,
    split: usize,
    total: u64,
}

impl CapturedOutput {
    fn from_parts(bytes: Vec<u8>, split: usize, total: u64) -> Self {
        // With nothing dropped, head and tail are one contiguous stream.
        let split = if total == bytes.len() as u64 {
            bytes.len()
        } else {
            split
        };
        Self {
            bytes,
            split,
            total,
        }
    }

    /// An empty stream.
    pub fn empty() -> Self {
        Self::from_parts(Vec::new(), 0, 0)
    }

    /// Every kept byte, head then tail, losslessly. Bytes dropped between
    /// them are not marked here; see [`CapturedOutput::text_lossy`].
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The kept start of the stream (the whole stream when nothing was dropped).
    pub fn head(&self) -> &[u8] {
        self.bytes.get(..self.split).unwrap_or_default()
    }

    /// The kept end of the stream (empty when nothing was dropped).
    pub fn tail(&self) -> &[u8] {
        self.bytes.get(self.split..).unwrap_or_default()
    }

    /// How many bytes the command wrote to this stream in all.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// How many bytes between head and tail were not kept.
    pub fn dropped_bytes(&self) -> u64 {
        self.total.saturating_sub(self.bytes.len() as u64)
    }

    /// Whether any byte was dropped.
    pub fn is_truncated(&self) -> bool {
        self.dropped_bytes() > 0
    }

    /// A text view for people: invalid UTF-8 replaced by U+FFFD and, when
    /// bytes were dropped, a line `[... N bytes dropped ...]` between head
    /// and tail.
    pub fn text_lossy(&self) -> String {
        if !self.is_truncated() {
            return String::from_utf8_lossy(&self.bytes).into_owned();
        }
        format!(
            "{}\n[... {} bytes dropped ...]\n{}",
            String::from_utf8_lossy(self.head()),
            self.dropped_bytes(),
            String::from_utf8_lossy(self.tail())
        )
    }

    /// Consumes the capture, returning the kept bytes (head then tail).
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// The stable JSON shape of [`CapturedOutput`].
#[derive(Serialize, Deserialize)]
struct CapturedOutputJson {
    total_bytes: u64,
    dropped_bytes: u64,
    encoding: Encoding,
    head: String,
    tail: String,
}

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    #[serde(rename = "utf-8")]
    Utf8,
    #[serde(rename = "base64")]
    Base64,
}

impl From<CapturedOutput> for CapturedOutputJson {
    fn from(c: CapturedOutput) -> Self {
        let dropped_bytes = c.dropped_bytes();
        let (head, tail) = (c.head(), c.tail());
        match (std::str::from_utf8(head), std::str::from_utf8(tail)) {
            (Ok(h), Ok(t)) => Self {
                total_bytes: c.total,
                dropped_bytes,
                encoding: Encoding::Utf8,
                head: h.to_owned(),
                tail: t.to_owned(),
            },
            _ => Self {
                total_bytes: c.total,
                dropped_bytes,
                encoding: Encoding::Base64,
                head: b64::encode(head),
                tail: b64::encode(tail),
            },
        }
    }
}

impl TryFrom<CapturedOutputJson> for CapturedOutput {
    type Error = String;

    fn try_from(j: CapturedOutputJson) -> Result<Self, Self::Error> {
        let (mut head, tail) = match j.encoding {
            Encoding::Utf8 => (j.head.into_bytes(), j.tail.into_bytes()),
            Encoding::Base64 => (
                b64::decode(&j.head).ok_or("head is not valid base64")?,
                b64::decode(&j.tail).ok_or("tail is not valid base64")?,
            ),
        };
        let kept = (head.len() + tail.len()) as u64;
        if kept.checked_add(j.dropped_bytes) != Some(j.total_bytes) {
            return Err(format!(
                "total_bytes {} is not head + tail + dropped_bytes ({kept} + {})",
                j.total_bytes, j.dropped_bytes
            ));
        }
        let split = head.len();
        head.extend(tail);
        Ok(Self::from_parts(head, split, j.total_bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(cap: usize, chunks: &[&[u8]]) -> CapturedOutput {
        let mut b = HeadTail::new(cap);
        for c in chunks {
            b.push(c);
        }
        b.finish()
    }

    #[test]
    fn small_stream_is_kept_whole() {
        let c = capture(10, &[b"abc", b"de"]);
        assert_eq!(c.bytes(), b"abcde");
        assert_eq!(c.head(), b"abcde");
        assert_eq!(c.tail(), b"");
        assert_eq!(c.dropped_bytes(), 0);
        assert_eq!(c.text_lossy(), "abcde");
    }

    #[test]
    fn exactly_the_cap_is_kept_whole() {
        let c = capture(10, &[b"0123456", b"789"]);
        assert_eq!(c.bytes(), b"0123456789");
        assert!(!c.is_truncated());
        assert_eq!(c.head(), b"0123456789");
    }

    #[test]
    fn keeps_head_and_tail_across_chunk_boundaries() {
        let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        for chunk in [1, 3, 7, 64, 999, 10_000] {
            let chunks: Vec<&[u8]> = data.chunks(chunk).collect();
            let c = capture(100, &chunks);
            assert_eq!(c.head(), &data[..50], "chunk {chunk}");
            assert_eq!(c.tail(), &data[data.len() - 50..], "chunk {chunk}");
            assert_eq!(c.dropped_bytes(), 9_900);
            assert_eq!(c.total_bytes(), 10_000);
        }
    }

    #[test]
    fn odd_cap_and_zero_cap() {
        let c = capture(5, &[b"abcdefgh"]);
        assert_eq!((c.head(), c.tail()), (&b"ab"[..], &b"fgh"[..]));
        let c = capture(0, &[b"abc"]);
        assert_eq!(c.bytes(), b"");
        assert_eq!(c.dropped_bytes(), 3);
    }

    #[test]
    fn lossy_text_marks_the_gap() {
        let c = capture(4, &[b"ab", b"XXXX", b"\xffz"]);
        assert_eq!(c.text_lossy(), "ab\n[... 4 bytes dropped ...]\n\u{fffd}z");
    }

    #[test]
    fn json_round_trips_text_and_binary() {
        for c in [
            capture(4, &[b"ab", b"XXXX", b"cd"]),
            capture(4, &[b"\xff\x00", b"XXXX", b"cd"]),
            capture(100, &[b"plain"]),
            CapturedOutput::empty(),
        ] {
            let j = serde_json::to_string(&c).unwrap();
            let back: CapturedOutput = serde_json::from_str(&j).unwrap();
            assert_eq!(back, c, "{j}");
        }
        let j = serde_json::to_value(capture(4, &[b"\xff\x00", b"XXXX", b"cd"])).unwrap();
        assert_eq!(
            j,
            serde_json::json!({"total_bytes": 8, "dropped_bytes": 4, "encoding": "base64", "head": "/wA=", "tail": "Y2Q="})
        );
    }

    #[test]
    fn json_with_inconsistent_counts_is_rejected() {
        let bad = r#"{"total_bytes":1,"dropped_bytes":0,"encoding":"utf-8","head":"ab","tail":""}"#;
        let err = serde_json::from_str::<CapturedOutput>(bad).unwrap_err();
        assert!(err.to_string().contains("total_bytes 1"), "{err}");
    }
}
