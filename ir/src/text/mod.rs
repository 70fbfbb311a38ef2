//! The text format (being written: API fixed, bodies placeholder until the text helper lands).
#![allow(missing_docs, unused_variables)]

use std::path::{Path, PathBuf};

use crate::graph::{Entity, Graph};

#[derive(Debug, thiserror::Error)]
#[error("{line}:{col}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct LoadError {
    pub path: PathBuf,
    pub message: String,
}

pub fn print(graph: &Graph) -> String {
    String::new()
}

pub fn print_annotated(graph: &Graph, notes: &[(Entity, String)]) -> String {
    String::new()
}

pub fn load(path: &Path) -> Result<Graph, LoadError> {
    Err(LoadError {
        path: path.to_path_buf(),
        message: "text format not yet written".into(),
    })
}

pub fn save(graph: &Graph, path: &Path) -> Result<(), LoadError> {
    Err(LoadError {
        path: path.to_path_buf(),
        message: "text format not yet written".into(),
    })
}
