//! A deterministic tar writer: GNU headers (long names as `././@LongLink`
//! entries), uid/gid 0, empty user and group names, no atime/ctime, one
//! fixed mtime, permission bits only; and the PAX filler that moves the
//! next member's data to a chosen offset.

use std::io::{self, Read, Write};

use tar::{EntryType, Header};

/// Size of a tar block: headers and member data are padded to it.
pub(crate) const BLOCK: usize = 512;
/// The smallest [`TarWriter::pax_filler`]: its header and one block of
/// records.
pub(crate) const MIN_FILLER: usize = 2 * BLOCK;
/// What the filler's `comment` record says, padded with spaces.
const FILLER_COMMENT: &str = "vibesys: fills the space before the next member so its data starts at a 4096-byte boundary of the archive";
/// Size of the copy buffer used for file contents.
pub(crate) const COPY_BUF: usize = 1 << 20;

pub(crate) struct TarWriter<W: Write> {
    out: W,
    mtime: u64,
    buf: Vec<u8>,
}

impl<W: Write> TarWriter<W> {
    pub(crate) fn new(out: W, mtime: u64) -> Self {
        Self {
            out,
            mtime,
            buf: Vec::new(),
        }
    }

    fn long(&mut self, kind: u8, value: &str) -> io::Result<()> {
        let size = value.len() as u64 + 1;
        let h = gnu_header(b"././@LongLink", None, EntryType::new(kind), 0, size, 0);
        self.out.write_all(&h)?;
        self.out.write_all(value.as_bytes())?;
        self.out.write_all(&[0])?;
        self.pad(size)
    }

    fn pad(&mut self, size: u64) -> io::Result<()> {
        let rem = (size % BLOCK as u64) as usize;
        if rem != 0 {
            self.out.write_all(&[0u8; BLOCK][..BLOCK - rem])?;
        }
        Ok(())
    }

    fn header(
        &mut self,
        name: &str,
        ty: EntryType,
        mode: u32,
        size: u64,
        link: Option<&str>,
    ) -> io::Result<()> {
        if name.len() > 100 {
            self.long(b'L', name)?;
        }
        if let Some(l) = link
            && l.len() > 100
        {
            self.long(b'K', l)?;
        }
        let h = gnu_header(name.as_bytes(), link, ty, mode, size, self.mtime);
        self.out.write_all(&h)
    }

    pub(crate) fn dir(&mut self, path: &str, mode: u32) -> io::Result<()> {
        self.header(&format!("{path}/"), EntryType::Directory, mode, 0, None)
    }

    pub(crate) fn symlink(&mut self, path: &str, target: &str) -> io::Result<()> {
        self.header(path, EntryType::Symlink, 0o777, 0, Some(target))
    }

    pub(crate) fn hardlink(&mut self, path: &str, target: &str) -> io::Result<()> {
        self.header(path, EntryType::Link, 0o644, 0, Some(target))
    }

    pub(crate) fn bytes(&mut self, path: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        self.header(path, EntryType::Regular, mode, data.len() as u64, None)?;
        self.out.write_all(data)?;
        self.pad(data.len() as u64)
    }

    /// Copies exactly `size` bytes of `src`; a file that changed size while
    /// being read is an error.
    pub(crate) fn file(
        &mut self,
        path: &str,
        mode: u32,
        size: u64,
        src: &mut impl Read,
    ) -> io::Result<()> {
        self.header(path, EntryType::Regular, mode, size, None)?;
        if self.buf.is_empty() {
            self.buf = vec![0u8; COPY_BUF];
        }
        let mut left = size;
        while left > 0 {
            let want = (left.min(COPY_BUF as u64)) as usize;
            let n = src.read(&mut self.buf[..want])?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shrank while being read",
                ));
            }
            self.out.write_all(&self.buf[..n])?;
            left -= n as u64;
        }
        let mut probe = [0u8; 1];
        if src.read(&mut probe)? != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "file grew while being read",
            ));
        }
        self.pad(size)
    }

    /// Writes a PAX extended header (`x`) of exactly `len` bytes (a multiple
    /// of 512, at least [`MIN_FILLER`]) whose one record is a `comment`.
    /// Readers apply an `x` header to the next member and ignore a comment
    /// (POSIX.1-2001 reserves it for that), so it only moves where the next
    /// member's header, and so its data, lies. Same `len`, same bytes.
    pub(crate) fn pax_filler(&mut self, len: usize) -> io::Result<()> {
        if len < MIN_FILLER || !len.is_multiple_of(BLOCK) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a PAX filler of {len} bytes: not a multiple of 512 of at least 1024"),
            ));
        }
        // The record fills the data blocks exactly, no padding: "LEN
        // comment=VALUE\n", where LEN counts its own digits too.
        let record = len - BLOCK;
        let prefix = format!("{record} comment=");
        let room = record - prefix.len() - 1;
        let text = &FILLER_COMMENT[..FILLER_COMMENT.len().min(room)];
        let mut data = String::with_capacity(record);
        data.push_str(&prefix);
        data.push_str(text);
        data.extend(std::iter::repeat_n(' ', room - text.len()));
        data.push('\n');
        debug_assert_eq!(data.len(), record);
        let mut h = Header::new_ustar();
        let name = b"././@PaxHeader";
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(self.mtime);
        h.set_size(record as u64);
        h.set_entry_type(EntryType::XHeader);
        h.set_cksum();
        self.out.write_all(h.as_bytes())?;
        self.out.write_all(data.as_bytes())
    }

    /// Writes bytes as they are (a header made by another writer, the tail
    /// of a member's data).
    pub(crate) fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)
    }

    /// Writes only the header of a regular file of `size` bytes: the caller
    /// places the content after it, then [`TarWriter::pad_after`].
    pub(crate) fn file_header(&mut self, path: &str, mode: u32, size: u64) -> io::Result<()> {
        self.header(path, EntryType::Regular, mode, size, None)
    }

    /// Writes the zeros that follow `size` bytes of content.
    pub(crate) fn pad_after(&mut self, size: u64) -> io::Result<()> {
        self.pad(size)
    }

    /// The inner writer.
    pub(crate) fn inner_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Writes the end-of-archive marker and returns the inner writer.
    pub(crate) fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&[0u8; BLOCK * 2])?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// A GNU tar header, byte for byte what the `tar` crate makes from
/// `Header::new_gnu()` and its setters (uid and gid 0; the first 100
/// bytes of `name` and `link`), without the allocation each of those
/// setters makes to format a number: a layer writes one header per entry
/// and counts its size with another, so they were most of a build's
/// allocations, and the static build's allocator has one lock.
pub(crate) fn gnu_header(
    name: &[u8],
    link: Option<&str>,
    ty: EntryType,
    mode: u32,
    size: u64,
    mtime: u64,
) -> [u8; BLOCK] {
    let mut h = [0u8; BLOCK];
    let n = name.len().min(100);
    h[..n].copy_from_slice(&name[..n]);
    octal_into(&mut h[100..108], u64::from(mode));
    num_field_into(&mut h[108..116], 0);
    num_field_into(&mut h[116..124], 0);
    num_field_into(&mut h[124..136], size);
    num_field_into(&mut h[136..148], mtime);
    h[156] = ty.as_byte();
    if let Some(l) = link {
        let n = l.len().min(100);
        h[157..157 + n].copy_from_slice(&l.as_bytes()[..n]);
    }
    h[257..263].copy_from_slice(b"ustar ");
    h[263..265].copy_from_slice(b" \0");
    // The checksum counts its own field as spaces.
    let sum: u32 = h[..148]
        .iter()
        .chain(&[b' '; 8])
        .chain(&h[156..])
        .map(|b| u32::from(*b))
        .sum();
    octal_into(&mut h[148..156], u64::from(sum));
    h
}

/// `val` in octal, right-aligned and padded with '0', a NUL last; digits
/// that do not fit are dropped (as the `tar` crate does).
pub(crate) fn octal_into(dst: &mut [u8], mut val: u64) {
    if let Some((last, digits)) = dst.split_last_mut() {
        *last = 0;
        for slot in digits.iter_mut().rev() {
            *slot = b'0' + (val & 7) as u8;
            val >>= 3;
        }
    }
}

/// A numeric field: octal, or GNU's binary form (the high bit set, the
/// value big-endian in the last eight bytes) for a value octal cannot
/// hold, where the `tar` crate switches to it.
fn num_field_into(dst: &mut [u8], val: u64) {
    if val >= 1 << 33 || (val >= 1 << 21 && dst.len() == 8) {
        let len = dst.len();
        dst.fill(0);
        dst[len - 8..].copy_from_slice(&val.to_be_bytes());
        dst[0] |= 0x80;
    } else {
        octal_into(dst, val);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pax_filler_moves_the_next_member_and_is_ignored() {
        for len in (MIN_FILLER..=5 * BLOCK + 4096).step_by(BLOCK) {
            let mut w = TarWriter::new(Vec::new(), 1);
            w.pax_filler(len).unwrap();
            w.bytes("blobs/sha256/a", 0o644, b"data").unwrap();
            let bytes = w.finish().unwrap();
            let mut ar = tar::Archive::new(&bytes[..]);
            let mut entries = ar.entries().unwrap();
            let mut e = entries.next().unwrap().unwrap();
            assert_eq!(e.path().unwrap().to_str(), Some("blobs/sha256/a"));
            assert_eq!(e.raw_file_position(), (len + BLOCK) as u64);
            let pax: Vec<_> = e.pax_extensions().unwrap().unwrap().collect();
            assert_eq!(pax.len(), 1);
            assert_eq!(pax[0].as_ref().unwrap().key(), Ok("comment"));
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut data).unwrap();
            assert_eq!(data, b"data");
            assert!(entries.next().is_none());
        }
        let mut w = TarWriter::new(Vec::new(), 1);
        assert!(w.pax_filler(512).is_err());
        assert!(w.pax_filler(1500).is_err());
    }

    #[test]
    fn round_trips_through_the_tar_crate() {
        let long = format!("{}/file", "d".repeat(120));
        let mut w = TarWriter::new(Vec::new(), 1);
        w.dir("a", 0o755).unwrap();
        w.bytes("a/f", 0o644, b"hello").unwrap();
        w.bytes(&long, 0o755, b"x").unwrap();
        w.symlink("a/l", &"t".repeat(150)).unwrap();
        w.hardlink("a/h", "a/f").unwrap();
        let bytes = w.finish().unwrap();
        let mut ar = tar::Archive::new(&bytes[..]);
        let names: Vec<String> = ar
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                assert_eq!(e.header().mtime().unwrap(), 1);
                assert_eq!(e.header().uid().unwrap(), 0);
                e.path().unwrap().to_string_lossy().into_owned()
            })
            .collect();
        assert_eq!(
            names,
            vec![
                "a/".to_owned(),
                "a/f".into(),
                long,
                "a/l".into(),
                "a/h".into()
            ]
        );
    }

    /// The tar crate's header for the same fields: what `gnu_header`
    /// must equal byte for byte (layer digests depend on it).
    fn crate_header(
        name: &[u8],
        link: Option<&str>,
        ty: EntryType,
        mode: u32,
        size: u64,
        mtime: u64,
    ) -> [u8; BLOCK] {
        let mut h = Header::new_gnu();
        let g = h.as_gnu_mut().unwrap();
        let n = name.len().min(100);
        g.name[..n].copy_from_slice(&name[..n]);
        if let Some(l) = link {
            let n = l.len().min(100);
            g.linkname[..n].copy_from_slice(&l.as_bytes()[..n]);
        }
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(mtime);
        h.set_size(size);
        h.set_entry_type(ty);
        h.set_cksum();
        *h.as_bytes()
    }

    #[test]
    fn headers_are_the_tar_crates_byte_for_byte() {
        let long = "n".repeat(130);
        let names: [&[u8]; 4] = [b"a", b"dir/", b"././@LongLink", long.as_bytes()];
        let links = [None, Some("t"), Some(long.as_str())];
        let types = [
            EntryType::Regular,
            EntryType::Directory,
            EntryType::Symlink,
            EntryType::Link,
            EntryType::new(b'L'),
        ];
        let modes = [0, 0o644, 0o755, 0o4755, 0o7777, 0o777];
        let numbers = [
            0,
            1,
            0o7777777,
            1 << 21,
            (1 << 33) - 1,
            1 << 33,
            1_700_000_000,
            u64::MAX >> 1,
            u64::MAX,
        ];
        for name in names {
            for link in links {
                for ty in types {
                    for mode in modes {
                        for size in numbers {
                            for mtime in [0, 1, 1_700_000_000, 1 << 33] {
                                assert_eq!(
                                    gnu_header(name, link, ty, mode, size, mtime),
                                    crate_header(name, link, ty, mode, size, mtime),
                                    "{name:?} {link:?} {ty:?} {mode:o} {size} {mtime}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
