//! A mapped ELF file: opened once, parsed on demand, borrowed by everything that reads it.

use std::{
    fs::File,
    path::{Path, PathBuf},
};

use memmap2::Mmap;
use object::{Object as _, ObjectSegment as _};

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not an ELF file we can read: {source}")]
    Parse {
        path: PathBuf,
        source: object::Error,
    },
}

/// An ELF file mapped read-only.
pub struct Binary {
    /// Where we opened it (possibly through `/proc/PID/root`).
    path: PathBuf,
    map: Mmap,
}

impl Binary {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ElfError> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|source| ElfError::Open {
            path: path.clone(),
            source,
        })?;
        // SAFETY: the mapping is read-only and private; a binary replaced on disk while we
        // read it is the same hazard every debugger accepts (we never write through it).
        let map = unsafe { Mmap::map(&file) }.map_err(|source| ElfError::Open {
            path: path.clone(),
            source,
        })?;
        let binary = Self { path, map };
        binary.object()?;
        Ok(binary)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The parsed ELF; cheap (headers only), so callers parse again rather than store it.
    pub fn object(&self) -> Result<object::File<'_>, ElfError> {
        object::File::parse(&*self.map).map_err(|source| ElfError::Parse {
            path: self.path.clone(),
            source,
        })
    }

    /// Runtime address minus ELF virtual address, given one mapping of this file in a process
    /// (its start address and file offset, as `/proc/PID/maps` shows them).
    pub fn load_bias(&self, map_start: u64, map_offset: u64) -> Option<u64> {
        let obj = self.object().ok()?;
        obj.segments().find_map(|seg| {
            let (seg_off, seg_size) = seg.file_range();
            // Checked: a damaged file may declare segments that overflow.
            let end = seg_off.checked_add(seg_size.max(1))?;
            if !(seg_off <= map_offset && map_offset < end) {
                return None;
            }
            // The mapping starts at map_offset's page; the segment's vaddr corresponds to
            // seg_off, so the address of map_offset is vaddr + (map_offset - seg_off).
            let at = seg.address().checked_add(map_offset - seg_off)?;
            Some(map_start.wrapping_sub(at))
        })
    }
}
