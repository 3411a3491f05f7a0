//! The files of `sim serve --state FILE`: a snapshot (`FILE`, a `SavedStore`) and journals
//! beside it (`FILE.journal-<resourceVersion>`, one `SavedChange` line per change after that
//! version), as etcd keeps a snapshot and a write-ahead log.
//!
//! Invariants:
//! - Every change is in the journal before the write that made it returns (the store calls the
//!   sink under its lock): killing the process loses no acknowledged write.
//! - At every instant the snapshot on disk and the journals on disk together hold every change:
//!   a checkpoint moves the store to a new journal and takes the snapshot in one step
//!   ([`canary_sim::Store::rotate_journal`]), writes the snapshot (a temporary file renamed into
//!   place), and only then removes the older journals, whose changes the snapshot holds.
//! - Loading replays every journal onto the snapshot, each change after the snapshot's version
//!   once, in order.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;
use canary_sim::Store;
use canary_sim::store::{JournalSink, STATE_FORMAT, SavedStore};

/// The state files of one `--state FILE`.
#[derive(Debug, Clone)]
pub struct StateFiles {
    snapshot: PathBuf,
}

impl StateFiles {
    /// The files of `snapshot` (the path given to `--state`).
    pub fn new(snapshot: PathBuf) -> Self {
        Self { snapshot }
    }

    /// The snapshot's path.
    pub fn snapshot(&self) -> &Path {
        &self.snapshot
    }

    /// The journal that starts after `resource_version`.
    fn journal(&self, resource_version: u64) -> PathBuf {
        let mut name = self.snapshot.as_os_str().to_owned();
        name.push(format!(".journal-{resource_version}"));
        PathBuf::from(name)
    }

    /// Every journal file beside the snapshot, with the version it starts after.
    fn journals(&self) -> anyhow::Result<Vec<(u64, PathBuf)>> {
        let dir = match self.snapshot.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
            _ => PathBuf::from("."),
        };
        let prefix = format!(
            "{}.journal-",
            self.snapshot
                .file_name()
                .with_context(|| format!("{} is not a file name", self.snapshot.display()))?
                .to_string_lossy()
        );
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => {
                return Err(error).with_context(|| format!("cannot list {}", dir.display()));
            }
        };
        let mut journals: Vec<(u64, PathBuf)> = entries
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let version = name.strip_prefix(&prefix)?.parse().ok()?;
                Some((version, entry.path()))
            })
            .collect();
        journals.sort();
        Ok(journals)
    }

    /// The saved cluster (snapshot and journals), or `None` when there is none yet.
    pub fn load(&self) -> anyhow::Result<Option<SavedStore>> {
        let snapshot = match std::fs::read(&self.snapshot) {
            Ok(text) => Some(
                serde_json::from_slice::<SavedStore>(&text).with_context(|| {
                    format!(
                        "{} is not a saved simulated cluster",
                        self.snapshot.display()
                    )
                })?,
            ),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("cannot read {}", self.snapshot.display()));
            }
        };
        let journals = self.journals()?;
        if snapshot.is_none() && journals.is_empty() {
            return Ok(None);
        }
        let mut saved = snapshot.unwrap_or(SavedStore {
            format: STATE_FORMAT,
            resource_version: 0,
            names_generated: 0,
            objects: Vec::new(),
        });
        for (_, journal) in journals {
            let lines = std::fs::read_to_string(&journal)
                .with_context(|| format!("cannot read {}", journal.display()))?;
            saved
                .apply(&lines)
                .with_context(|| format!("{} is not a journal", journal.display()))?;
        }
        Ok(Some(saved))
    }

    /// A sink appending to the journal that starts after `resource_version` (created if
    /// missing). A failed write is warned once per journal; the change stays in the store.
    pub fn sink(&self, resource_version: u64) -> anyhow::Result<JournalSink> {
        let path = self.journal(resource_version);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let file = Mutex::new((file, false));
        Ok(JournalSink::new(move |line| {
            let mut guard = file
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (file, warned) = &mut *guard;
            if let Err(error) = file.write_all(line)
                && !std::mem::replace(warned, true)
            {
                tracing::warn!(journal = %path.display(), %error, "cannot write the journal: a restart may lose changes");
            }
        }))
    }

    /// A checkpoint: the store moves to a new journal (none when `keep_journal` is false, at
    /// exit), its snapshot is written, and the older journals are removed. Returns the
    /// snapshot's `resourceVersion`.
    pub fn checkpoint(&self, store: &Store, keep_journal: bool) -> anyhow::Result<u64> {
        let next = store.resource_version();
        let sink = if keep_journal {
            Some(self.sink(next)?)
        } else {
            None
        };
        let saved = store.rotate_journal(sink);
        // Changes may have come between reading the version and the rotation: the new journal
        // is named after the version read, and replaying skips what the snapshot holds.
        let version = saved.resource_version;
        let text = serde_json::to_vec(&saved).context("cannot encode the cluster")?;
        super::write_atomically(&self.snapshot, &text)?;
        for (start, journal) in self.journals()? {
            let current = keep_journal && start == next;
            if !current {
                std::fs::remove_file(&journal)
                    .with_context(|| format!("cannot remove {}", journal.display()))?;
            }
        }
        Ok(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn config_map(name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.to_owned());
        cm.metadata.namespace = Some("default".to_owned());
        cm
    }

    /// A store killed at any point after a checkpoint comes back with every change it made:
    /// the snapshot holds those before the checkpoint, the journal those after; changes after
    /// the last checkpoint, a deletion among them, survive without one.
    #[test]
    fn snapshot_and_journal_hold_every_change() {
        let dir = std::env::temp_dir().join(format!("sim-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let files = StateFiles::new(dir.join("state.json"));
        assert!(files.load().unwrap().is_none());

        let store = Store::new(canary_sim::SimClock::new());
        store.set_journal(Some(files.sink(0).unwrap()));
        store.create(&config_map("a")).unwrap();
        store.create(&config_map("b")).unwrap();
        let checkpointed = files.checkpoint(&store, true).unwrap();
        assert_eq!(checkpointed, 2);
        store.create(&config_map("c")).unwrap();
        store.delete::<ConfigMap>(Some("default"), "a").unwrap();
        let kept: Vec<String> = files
            .journals()
            .unwrap()
            .into_iter()
            .map(|(start, _)| start.to_string())
            .collect();
        assert_eq!(kept, ["2"], "the journal before the checkpoint is gone");

        // Killed now: no exit checkpoint.
        let saved = files.load().unwrap().unwrap();
        assert_eq!(saved.resource_version, 4);
        let restored = Store::new(canary_sim::SimClock::new());
        restored.restore(saved).unwrap();
        let names: Vec<String> = restored
            .list::<ConfigMap>(Some("default"))
            .into_iter()
            .filter_map(|cm| cm.metadata.name)
            .collect();
        assert_eq!(names, ["b", "c"]);
        assert_eq!(restored.resource_version(), 4);
        let next = restored.create(&config_map("d")).unwrap();
        assert_eq!(next.metadata.resource_version.as_deref(), Some("5"));

        // A clean exit leaves the snapshot alone.
        files.checkpoint(&store, false).unwrap();
        assert!(files.journals().unwrap().is_empty());
        assert_eq!(files.load().unwrap().unwrap().resource_version, 4);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
