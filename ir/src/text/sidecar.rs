//! Files: `.tir` text plus a safetensors sidecar for `external` constants.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use safetensors::tensor::{Dtype, View};

use super::ParseError;
use super::parser::{PendingConst, parse_file};
use super::printer::{const_names, is_inline, print_impl, ty};
use crate::graph::{Constant, Graph};
use crate::types::{ElemType, TensorType};

/// An error of [`load`](super::load) (or of [`Sidecar::open`]); every variant names a file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file could not be read or mapped.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The text does not parse (this includes external constants missing from the sidecar
    /// or disagreeing with it); shown as `path:line:col: message`.
    #[error("{}:{error}", path.display())]
    Parse {
        /// The text file.
        path: PathBuf,
        /// Where and why.
        error: ParseError,
    },
    /// The sidecar is missing or is not a valid safetensors file.
    #[error("{}: {message}", path.display())]
    Sidecar {
        /// The sidecar file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

impl LoadError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            LoadError::Io { path, .. }
            | LoadError::Parse { path, .. }
            | LoadError::Sidecar { path, .. } => path,
        }
    }
}

/// An error of [`save`](super::save).
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// Writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// An external constant cannot be stored (its data does not match its type, or the
    /// safetensors serializer refused it).
    #[error("{}: {message}", path.display())]
    Sidecar {
        /// The sidecar file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// The path of the sidecar of a text file: the same path with extension `.safetensors`
/// (`model.tir` -> `model.safetensors`).
pub fn sidecar_path(path: &Path) -> PathBuf {
    path.with_extension("safetensors")
}

/// A safetensors file holding the data of `external` constants, one tensor per constant,
/// named like the constant.
///
/// The buffer is shared: the constants that [`parse`](super::parse) builds from it are
/// slices of it (for [`Sidecar::open`], of the memory map), never copies.
#[derive(Clone, Debug)]
pub struct Sidecar {
    origin: String,
    data: Bytes,
    tensors: BTreeMap<String, Entry>,
}

/// A tensor of a safetensors file: its dtype, shape and byte range in the file.
type Entry = (Dtype, Vec<usize>, Range<usize>);

impl Sidecar {
    /// Memory-maps a safetensors file.
    pub fn open(path: &Path) -> Result<Sidecar, LoadError> {
        let data = map_file(path).map_err(|source| LoadError::Io {
            path: path.into(),
            source,
        })?;
        Sidecar::from_bytes(data, path.display().to_string()).map_err(|message| {
            LoadError::Sidecar {
                path: path.into(),
                message,
            }
        })
    }

    /// Reads safetensors data from a buffer; `origin` names it in error messages.
    pub fn from_bytes(data: Bytes, origin: impl Into<String>) -> Result<Sidecar, String> {
        let (n, meta) = safetensors::SafeTensors::read_metadata(&data)
            .map_err(|e| format!("not a valid safetensors file: {e}"))?;
        let start = 8 + n;
        let tensors = meta
            .tensors()
            .into_iter()
            .map(|(name, info)| {
                let (a, b) = info.data_offsets;
                (name, (info.dtype, info.shape.clone(), start + a..start + b))
            })
            .collect();
        Ok(Sidecar {
            origin: origin.into(),
            data,
            tensors,
        })
    }

    /// The tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Whether the file gives constant `name`: under its name, or packed into panels
    /// ([`crate::panels`]), which [`Sidecar::lookup`] unpacks.
    pub fn gives(&self, name: &str) -> bool {
        self.tensors.contains_key(name) || self.packed(name).is_some()
    }

    /// The copy of `name` packed into panels ([`crate::panels`]) that the file holds, with
    /// its panel width: the first in name order when there are several.
    fn packed(&self, name: &str) -> Option<(u64, &Entry)> {
        let prefix = format!("{name}@panels");
        self.tensors
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .find_map(|(k, t)| match crate::panels::parse(k) {
                Some((c, p)) if c == name => Some((p, t)),
                _ => None,
            })
    }

    /// The data of tensor `name`, checked against the declared type `ty`; a `[K, N]` `f32`
    /// that the file holds only packed into panels is unpacked.
    pub(crate) fn lookup(&self, name: &str, ty: &TensorType) -> Result<Bytes, String> {
        let want: Option<Vec<usize>> = ty
            .static_dims()
            .and_then(|d| d.into_iter().map(|x| usize::try_from(x).ok()).collect());
        let Some((dtype, shape, range)) = self.tensors.get(name) else {
            let Some((p, (dtype, shape, range))) = self.packed(name) else {
                return Err(format!(
                    "external constant `@{name}` is not in {}",
                    self.origin
                ));
            };
            let packed = crate::panels::name(name, p);
            let (k, n) = match want.as_deref() {
                Some(&[k, n]) if ty.elem == ElemType::F32 => (k as u64, n as u64),
                _ => {
                    return Err(format!(
                        "external constant `@{name}` is declared {}, but {} holds it packed \
                         into panels (`{packed}`), which only an f32 matrix can be",
                        super::printer::ty(ty),
                        self.origin
                    ));
                }
            };
            let dims = crate::panels::dims(k, n, p);
            if *dtype != Dtype::F32 || !shape.iter().map(|&d| d as u64).eq(dims) {
                return Err(format!(
                    "external constant `@{name}` is declared {}, so its panels `{packed}` \
                     should be F32{dims:?}, but {} holds {dtype:?}{shape:?}",
                    super::printer::ty(ty),
                    self.origin
                ));
            }
            return crate::panels::unpack(&self.data[range.clone()], k, n, p)
                .map(Bytes::from)
                .ok_or_else(|| {
                    format!(
                        "`{packed}` in {} has nonzero padding past column {n}",
                        self.origin
                    )
                });
        };
        if *dtype != dtype_of(ty.elem) || want.as_ref() != Some(shape) {
            return Err(format!(
                "external constant `@{name}` is declared {} but {} holds {dtype:?}{shape:?}",
                super::printer::ty(ty),
                self.origin
            ));
        }
        Ok(self.data.slice(range.clone()))
    }
}

/// Memory-maps a whole file into a shared buffer.
#[allow(unsafe_code)]
fn map_file(path: &Path) -> std::io::Result<Bytes> {
    let file = File::open(path)?;
    // SAFETY: the map is read-only. Modifying or truncating the file while it is mapped is
    // undefined behaviour; tessera never writes a file in place (`save` writes a new file and
    // renames it over the old one, which leaves existing maps intact), and we accept the
    // usual risk of other programs doing so, as every mmap-based weight loader does.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    Ok(Bytes::from_owner(map))
}

/// The safetensors dtype that stores an element type (bool: one byte per element).
pub fn dtype_of(elem: ElemType) -> Dtype {
    match elem {
        ElemType::F16 => Dtype::F16,
        ElemType::BF16 => Dtype::BF16,
        ElemType::F32 => Dtype::F32,
        ElemType::F64 => Dtype::F64,
        ElemType::I8 => Dtype::I8,
        ElemType::I16 => Dtype::I16,
        ElemType::I32 => Dtype::I32,
        ElemType::I64 => Dtype::I64,
        ElemType::U8 => Dtype::U8,
        ElemType::Bool => Dtype::BOOL,
    }
}

/// Adds the parsed constants to the graph, taking external data from `sidecar`.
pub(crate) fn resolve(
    mut graph: Graph,
    consts: Vec<PendingConst>,
    sidecar: Option<&Sidecar>,
) -> Result<Graph, ParseError> {
    for c in consts {
        let data = match c.data {
            Some(d) => d,
            None => match sidecar {
                Some(s) => s.lookup(&c.name, &c.ty).map_err(|m| c.pos.error(m))?,
                None => {
                    return Err(c.pos.error(format!(
                        "constant `@{}` is external, but no sidecar was given",
                        c.name
                    )));
                }
            },
        };
        graph.add_const(Constant {
            name: c.name,
            ty: c.ty,
            data,
        });
    }
    Ok(graph)
}

/// See [`super::load`].
pub(crate) fn load(path: &Path) -> Result<Graph, LoadError> {
    let src = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.into(),
        source,
    })?;
    let parse_err = |error| LoadError::Parse {
        path: path.into(),
        error,
    };
    let (graph, consts) = parse_file(&src).map_err(parse_err)?;
    let sidecar = match consts.iter().find(|c| c.data.is_none()) {
        None => None,
        Some(first) => {
            let side = sidecar_path(path);
            let data = map_file(&side).map_err(|e| LoadError::Sidecar {
                path: side.clone(),
                message: format!(
                    "cannot open the sidecar of {} (external constant `@{}` lives there): {e}",
                    path.display(),
                    first.name
                ),
            })?;
            Some(
                Sidecar::from_bytes(data, side.display().to_string()).map_err(|message| {
                    LoadError::Sidecar {
                        path: side,
                        message,
                    }
                })?,
            )
        }
    };
    resolve(graph, consts, sidecar.as_ref()).map_err(parse_err)
}

/// One external constant as a safetensors view.
struct ConstView<'a> {
    dtype: Dtype,
    shape: Vec<usize>,
    data: &'a [u8],
}

impl View for ConstView<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// See [`super::save`].
pub(crate) fn save(graph: &Graph, path: &Path) -> Result<(), SaveError> {
    save_impl(graph, path, None).map(|_| ())
}

/// [`save`](super::save), sharing the data with `shared`, a safetensors file in the same
/// folder as `path` that already holds every external constant of the graph (under its
/// name, with its type and bytes, or packed into panels as [`crate::panels`] stores it and
/// [`Sidecar`] reads it back; it may hold more): the sidecar is then a relative
/// symbolic link to `shared`, so the weights are on disk once. Otherwise the sidecar is
/// written as `save` writes it. Returns whether the data was shared.
pub fn save_sharing(graph: &Graph, path: &Path, shared: &Path) -> Result<bool, SaveError> {
    save_impl(graph, path, Some(shared))
}

fn save_impl(graph: &Graph, path: &Path, shared: Option<&Path>) -> Result<bool, SaveError> {
    let text = print_impl(graph, &[]);
    let names = const_names(graph);
    let side = sidecar_path(path);
    let side_err = |message: String| SaveError::Sidecar {
        path: side.clone(),
        message,
    };
    let mut views = Vec::new();
    for (id, c) in graph.consts().filter(|(_, c)| !is_inline(c)) {
        let shape = c
            .ty
            .static_dims()
            .and_then(|d| d.into_iter().map(|x| usize::try_from(x).ok()).collect())
            .ok_or_else(|| side_err(format!("constant `@{}` has type {}", c.name, ty(&c.ty))))?;
        if c.ty.size_bytes() != Some(c.data.len() as u64) {
            return Err(side_err(format!(
                "constant `@{}` of type {} has {} bytes of data",
                c.name,
                ty(&c.ty),
                c.data.len()
            )));
        }
        let view = ConstView {
            dtype: dtype_of(c.ty.elem),
            shape,
            data: &c.data,
        };
        views.push((names[id.index()].clone(), view));
    }
    // Sidecar first, so that a text that names external constants never lacks its data.
    let mut linked = false;
    if !views.is_empty() {
        match shared.and_then(|sh| link_target(&side, sh, &views)) {
            Some(target) => {
                link_atomically(&side, &target).map_err(side_err)?;
                linked = true;
            }
            // safetensors sorts tensors by dtype alignment then name, and writes no other
            // metadata, so equal graphs give equal bytes.
            // The serializer streams tensor data to the file, so saving needs no second copy
            // of the weights in memory.
            None => write_safetensors(&side, views).map_err(side_err)?,
        }
    }
    write_atomic(path, text.as_bytes())?;
    Ok(linked)
}

/// The relative link from the sidecar `side` to `shared` when `shared` is a safetensors
/// file next to it that holds every one of `views` (same name, dtype, shape and bytes).
fn link_target(side: &Path, shared: &Path, views: &[(String, ConstView<'_>)]) -> Option<PathBuf> {
    let dir = |p: &Path| {
        p.parent()
            .map(|d| {
                if d.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    d
                }
            })
            .and_then(|d| d.canonicalize().ok())
    };
    let name = shared.file_name()?;
    if dir(side)? != dir(shared)? || side.file_name() == Some(name) {
        return None;
    }
    let sidecar = Sidecar::open(shared).ok()?;
    let all = views.iter().all(|(n, v)| match sidecar.tensors.get(n) {
        Some((dtype, shape, range)) => {
            *dtype == v.dtype && *shape == v.shape && sidecar.data[range.clone()] == *v.data
        }
        // Held only packed into panels, as [`Sidecar::lookup`] reads it back.
        None => match (sidecar.packed(n), v.shape.as_slice()) {
            (Some((p, (dtype, shape, range))), &[k, cols]) => {
                let dims = crate::panels::dims(k as u64, cols as u64, p);
                v.dtype == Dtype::F32
                    && *dtype == Dtype::F32
                    && shape.iter().map(|&d| d as u64).eq(dims)
                    && crate::panels::holds(
                        &sidecar.data[range.clone()],
                        v.data,
                        k as u64,
                        cols as u64,
                        p,
                    )
            }
            _ => false,
        },
    });
    all.then(|| PathBuf::from(name))
}

/// A private temporary folder next to `path`, where a file is staged before it is renamed
/// over `path`.
fn staging_dir(path: &Path) -> Result<tempfile::TempDir, String> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    tempfile::Builder::new()
        .prefix(".tessera-")
        .tempdir_in(dir)
        .map_err(|e| format!("cannot create a temporary folder in {}: {e}", dir.display()))
}

/// Makes `path` a symbolic link to `target` (relative to `path`'s folder), replacing what
/// was there in one rename.
fn link_atomically(path: &Path, target: &Path) -> Result<(), String> {
    let tmp = staging_dir(path)?;
    let staged = tmp.path().join("link");
    std::os::unix::fs::symlink(target, &staged).map_err(|e| e.to_string())?;
    std::fs::rename(&staged, path).map_err(|e| e.to_string())
}

/// Writes the safetensors file of `views` (in name order; no other metadata, so equal
/// views give equal bytes) at `path` without a copy of the data in memory: streamed into a
/// private temporary folder next to `path`, given the permissions a plain create would (or
/// those of the file it replaces), synced and renamed over `path`, so that no reader sees
/// half of it.
pub fn write_safetensors<V: View>(path: &Path, views: Vec<(String, V)>) -> Result<(), String> {
    let tmp = staging_dir(path)?;
    let staged = tmp.path().join("staged.safetensors");
    safetensors::serialize_to_file(views, None, &staged).map_err(|e| e.to_string())?;
    // A plain create's mode (the umask applied) unless an existing file's mode is kept.
    let mode = match std::fs::metadata(path) {
        Ok(m) => m.permissions(),
        Err(_) => {
            let probe = tmp.path().join("probe");
            std::fs::File::create(&probe)
                .and_then(|f| f.metadata())
                .map(|m| m.permissions())
                .map_err(|e| e.to_string())?
        }
    };
    let file = std::fs::File::open(&staged).map_err(|e| e.to_string())?;
    file.set_permissions(mode).map_err(|e| e.to_string())?;
    file.sync_all().map_err(|e| e.to_string())?;
    std::fs::rename(&staged, path).map_err(|e| e.to_string())
}

/// Writes a temporary file next to `path`, then renames it over `path`.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SaveError> {
    write_atomically(path, |f| f.write_all(bytes)).map_err(|source| SaveError::Io {
        path: path.into(),
        source,
    })
}

/// Writes a file atomically: `write` fills a temporary file in the same folder, which is
/// synced and renamed over `path`, so readers never see a half-written file. A new file gets
/// the permissions of a plain create (on Unix `0o666` less the process umask, as
/// `File::create` gives); a file that is replaced keeps its permissions.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".tessera-").suffix(".tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // The mode passed to open(2); the kernel applies the umask to it (the tempfile
        // default is 0600).
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let mut tmp = builder.tempfile_in(dir)?;
    write(tmp.as_file_mut())?;
    if let Ok(m) = std::fs::metadata(path) {
        tmp.as_file().set_permissions(m.permissions())?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
