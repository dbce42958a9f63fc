//! A deterministic tar writer: GNU headers (long names as `././@LongLink`
//! entries), uid/gid 0, empty user and group names, no atime/ctime, one
//! fixed mtime, permission bits only.

use std::io::{self, Read, Write};

use tar::{EntryType, Header};

const BLOCK: usize = 512;
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
        let mut h = Header::new_gnu();
        if let Some(g) = h.as_gnu_mut() {
            g.name[..13].copy_from_slice(b"././@LongLink")
        }
        h.set_mode(0);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(value.len() as u64 + 1);
        h.set_entry_type(EntryType::new(kind));
        h.set_cksum();
        self.out.write_all(h.as_bytes())?;
        self.out.write_all(value.as_bytes())?;
        self.out.write_all(&[0])?;
        self.pad(value.len() as u64 + 1)
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
        let mut h = Header::new_gnu();
        if let Some(g) = h.as_gnu_mut() {
            let n = name.len().min(100);
            g.name[..n].copy_from_slice(&name.as_bytes()[..n]);
            if let Some(l) = link {
                let n = l.len().min(100);
                g.linkname[..n].copy_from_slice(&l.as_bytes()[..n]);
            }
        }
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(self.mtime);
        h.set_size(size);
        h.set_entry_type(ty);
        h.set_cksum();
        self.out.write_all(h.as_bytes())
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

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
}
