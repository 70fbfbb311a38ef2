//! An output directory written as a whole: `compile -o DIR` writes everything into a fresh
//! sibling folder and swaps it into place at the end, so a compile killed at any moment
//! leaves the old `DIR` or the new one, never a mix of the two.
//!
//! The sibling is `.<name>.tessera-tmp-<pid>` next to `DIR`. At the end it is exchanged with
//! an existing `DIR` in one atomic `renameat2(RENAME_EXCHANGE)` (Linux), and the old contents,
//! now under the temporary name, are removed; a new `DIR` is a plain rename. Where the file
//! system cannot exchange, the old `DIR` is first renamed aside (`.<name>.tessera-old-<pid>`),
//! so an interrupted swap still leaves one whole folder. Temporary folders of earlier runs
//! whose process is gone are removed when the next run starts; a failed run removes its own.
//!
//! `DIR` itself is replaced whole, so it must be empty or an earlier compile's output
//! (it holds `manifest.json`): `-o` never deletes a folder of someone else's files.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The file that marks a folder as a compile's output.
const MARKER: &str = "manifest.json";
const TMP: &str = ".tessera-tmp-";
const OLD: &str = ".tessera-old-";

/// A directory being written; [`OutputDir::commit`] puts it in place, dropping it without
/// committing removes it.
pub struct OutputDir {
    target: PathBuf,
    tmp: PathBuf,
    committed: bool,
}

impl OutputDir {
    /// Starts writing `dir`: checks it may be replaced, removes stale temporary folders of
    /// killed runs, and creates the fresh sibling.
    pub fn create(dir: &Path) -> Result<OutputDir> {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| !n.is_empty() && *n != "." && *n != "..")
            .with_context(|| {
                format!(
                    "-o {}: the output directory needs a plain final name",
                    dir.display()
                )
            })?
            .to_string();
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
        match std::fs::symlink_metadata(dir) {
            Ok(m) if !m.is_dir() => bail!("-o {}: exists and is not a directory", dir.display()),
            Ok(_) => {
                let mut entries = std::fs::read_dir(dir)
                    .with_context(|| format!("cannot read {}", dir.display()))?;
                if entries.next().is_some() && !dir.join(MARKER).is_file() {
                    bail!(
                        "-o {}: the directory is not empty and is not a tessera compile's output \
                         (no {MARKER}); it would be replaced whole, so give an empty or new \
                         directory",
                        dir.display()
                    );
                }
            }
            Err(_) => {}
        }
        remove_stale(&parent, &name);
        let tmp = parent.join(format!(".{name}{TMP}{}", std::process::id()));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)
                .with_context(|| format!("cannot remove {}", tmp.display()))?;
        }
        std::fs::create_dir(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        Ok(OutputDir {
            target: dir.to_path_buf(),
            tmp,
            committed: false,
        })
    }

    /// Where the files go until [`OutputDir::commit`].
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// Puts the written folder in place of the target, atomically.
    pub fn commit(mut self) -> Result<()> {
        let swap_err = |e: std::io::Error| {
            anyhow::Error::new(e).context(format!(
                "cannot move {} to {}",
                self.tmp.display(),
                self.target.display()
            ))
        };
        if std::fs::symlink_metadata(&self.target).is_ok() {
            match rustix::fs::renameat_with(
                rustix::fs::CWD,
                &self.tmp,
                rustix::fs::CWD,
                &self.target,
                rustix::fs::RenameFlags::EXCHANGE,
            ) {
                Ok(()) => {
                    // `tmp` now holds the old output.
                    self.committed = true;
                    let _ = std::fs::remove_dir_all(&self.tmp);
                    return Ok(());
                }
                Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {
                    let aside = self.aside();
                    std::fs::rename(&self.target, &aside).map_err(swap_err)?;
                    std::fs::rename(&self.tmp, &self.target).map_err(swap_err)?;
                    self.committed = true;
                    let _ = std::fs::remove_dir_all(&aside);
                    return Ok(());
                }
                Err(e) => return Err(swap_err(e.into())),
            }
        }
        std::fs::rename(&self.tmp, &self.target).map_err(swap_err)?;
        self.committed = true;
        Ok(())
    }

    fn aside(&self) -> PathBuf {
        let name = self
            .target
            .file_name()
            .unwrap_or_default()
            .to_string_lossy();
        self.tmp
            .with_file_name(format!(".{name}{OLD}{}", std::process::id()))
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }
}

/// Removes a killed compile's folder. A tool it ran may still be finishing a file there
/// for a moment (clang dies with tessera, but the linker clang started does not), which
/// makes one removal fail with the folder not empty: it is tried again, a few times.
fn remove_tree(path: &Path) {
    for _ in 0..10 {
        match std::fs::remove_dir_all(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            _ => return,
        }
    }
}

/// Removes `.<name>.tessera-tmp-<pid>` and `.<name>.tessera-old-<pid>` folders in `parent`
/// whose process no longer runs (a killed compile's). An aside folder whose target is missing
/// is the only whole copy left by a swap cut short: it is put back instead.
fn remove_stale(parent: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let prefix = format!(".{name}");
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(rest) = file.to_str().and_then(|f| f.strip_prefix(&prefix)) else {
            continue;
        };
        let (old, pid) = if let Some(pid) = rest.strip_prefix(TMP) {
            (false, pid)
        } else if let Some(pid) = rest.strip_prefix(OLD) {
            (true, pid)
        } else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if pid != std::process::id() && Path::new(&format!("/proc/{pid}")).exists() {
            continue; // another compile into the same folder is running
        }
        let path = entry.path();
        let target = parent.join(name);
        if old && std::fs::symlink_metadata(&target).is_err() {
            let _ = std::fs::rename(&path, &target);
        } else {
            remove_tree(&path);
        }
    }
}
