//! `--pprof-dir`: each profile as a file `SERVICE-TARGET-UNIXMS.pb.gz` (TARGET: the pid, or a
//! cgroup's container id's first 12 digits or name; UNIXMS: the end of its
//! interval, 13 digits, so that names sort by time), written under a temporary name and
//! renamed, so that a reader never sees half a file; then the target's oldest files beyond
//! `--pprof-keep` are removed. Touches only files of that pattern in that directory.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

use super::labels::Labels;

/// The directory and how many profiles of each target it keeps.
#[derive(Debug, Clone)]
pub struct PprofDir {
    pub dir: PathBuf,
    pub keep: usize,
}

impl PprofDir {
    /// Creates the directory if needed, and checks that files can be written into it.
    pub fn open(dir: &Path, keep: usize) -> Result<Self, String> {
        if keep == 0 {
            return Err("--pprof-keep must be at least 1".to_string());
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("--pprof-dir {}: {e}", dir.display()))?;
        let probe = dir.join(format!(".oi-trace-{}.probe", std::process::id()));
        std::fs::write(&probe, b"")
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|e| format!("--pprof-dir {}: cannot write there: {e}", dir.display()))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            keep,
        })
    }

    /// Writes one target's profile of the interval ending `until`; returns its path.
    pub fn write(
        &self,
        labels: &Labels,
        target: &str,
        until: SystemTime,
        pprof_gz: &[u8],
    ) -> std::io::Result<PathBuf> {
        let prefix = prefix(labels, target);
        let ms = until
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let path = self.dir.join(format!("{prefix}{ms:013}.pb.gz"));
        let temporary = self.dir.join(format!(".{prefix}{ms:013}.pb.gz.tmp"));
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(pprof_gz)?;
        file.sync_data()?;
        std::fs::rename(&temporary, &path)?;
        self.rotate(&prefix)?;
        Ok(path)
    }

    /// Removes the oldest files of `prefix` beyond `keep`.
    fn rotate(&self, prefix: &str) -> std::io::Result<()> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| is_profile_of(n, prefix))
            .collect();
        names.sort();
        let excess = names.len().saturating_sub(self.keep);
        for name in &names[..excess] {
            std::fs::remove_file(self.dir.join(name))?;
        }
        Ok(())
    }
}

/// `SERVICE-TARGET-`.
fn prefix(labels: &Labels, target: &str) -> String {
    // A service name may hold '/', which a file name cannot.
    format!(
        "{}-{}-",
        labels.service_name.replace('/', "_"),
        target.replace('/', "_")
    )
}

/// Whether `name` is `PREFIX` + 13 digits + `.pb.gz`.
fn is_profile_of(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|rest| rest.strip_suffix(".pb.gz"))
        .is_some_and(|ms| ms.len() == 13 && ms.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn writes_and_keeps_the_newest() {
        let dir = std::env::temp_dir().join(format!("oi-pprof-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = PprofDir::open(&dir, 2).unwrap();
        let labels = Labels {
            service_name: "a/b".into(),
            pairs: vec![],
        };
        // Another target's file and a stranger stay.
        std::fs::write(dir.join("a_b-8-0000000000001.pb.gz"), b"x").unwrap();
        std::fs::write(dir.join("notes.txt"), b"x").unwrap();
        let mut written = Vec::new();
        for s in 1..=3 {
            let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s);
            written.push(out.write(&labels, "7", t, &[s as u8]).unwrap());
        }
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "a_b-7-1700000002000.pb.gz",
                "a_b-7-1700000003000.pb.gz",
                "a_b-8-0000000000001.pb.gz",
                "notes.txt"
            ]
        );
        assert_eq!(std::fs::read(&written[2]).unwrap(), [3]);
        assert!(PprofDir::open(&dir, 0).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
