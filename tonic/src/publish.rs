//! Finding a local server by a path: the server writes its endpoint name,
//! in [`xfer::Address`]'s text form, to a file clients read at each
//! connect. Over `shm`, whose names are a process id and a nonce with no
//! host or port, this is how a client finds a server started apart from it
//! (as gRPC's `unix:` targets name a socket file); it works the same for
//! every provider.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use xfer::Address;
use xfer_tarpc::Node;

/// A server's name published at a path, until dropped: dropping removes
/// the file, unless another server has published its own name there since.
#[derive(Debug)]
pub struct Published {
    path: PathBuf,
    text: String,
}

impl Published {
    /// Where the name is published.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        if fs::read_to_string(&self.path).is_ok_and(|now| now == self.text) {
            if let Err(e) = fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "xfer-tonic: removing a published name failed");
            }
        }
    }
}

/// Publishes `node`'s endpoint name at `path` (a line of hex digits),
/// replacing whatever was there at once: it is written to a file beside it
/// and renamed, so a client reads the old name or the new one, never a part.
pub fn publish(node: &Node, path: impl AsRef<Path>) -> io::Result<Published> {
    let path = path.as_ref().to_path_buf();
    let text = format!("{}\n", Address::new(&node.name()).map_err(io::Error::from)?);
    let mut temp = path.clone().into_os_string();
    temp.push(format!(".{}.tmp", std::process::id()));
    fs::write(&temp, &text)?;
    if let Err(e) = fs::rename(&temp, &path) {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    Ok(Published { path, text })
}

/// The endpoint name published at `path`: `NotFound` when no server
/// published there, `InvalidData` when the file holds no name.
pub fn lookup(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    let path = path.as_ref();
    let text = fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("no xfer server name at {}: {e}", path.display())))?;
    let name: Address = text.trim().parse().map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} holds no xfer endpoint name: {e}", path.display()),
        )
    })?;
    Ok(name.as_bytes().to_vec())
}
