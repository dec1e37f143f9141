//! The address vector handle users see.

use std::sync::Arc;

use crate::addr::{Address, AvTable, PeerAddr};
use crate::domain::Shared;
use crate::error::{Error, Result};

/// Peers' names mapped to compact handles ([`PeerAddr`]); shared by the
/// endpoints bound to it. Cloning gives another handle to the same table.
#[derive(Clone)]
pub struct AddressVector(Arc<Handle>);

struct Handle {
    shared: Arc<Shared>,
    key: usize,
}

impl AddressVector {
    pub(crate) fn open(shared: Arc<Shared>) -> Result<AddressVector> {
        let key = shared.lock()?.avs.insert(AvTable::new());
        Ok(AddressVector(Arc::new(Handle { shared, key })))
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.0.shared
    }

    pub(crate) fn key(&self) -> usize {
        self.0.key
    }

    /// Inserts a peer's name (the bytes of its `Endpoint::name`); refuses
    /// bytes that are not a name of this domain's provider. Inserting the
    /// same name twice returns the same handle.
    pub fn insert(&self, name: &[u8]) -> Result<PeerAddr> {
        let mut st = self.0.shared.lock()?;
        let addr = st.prov.check_address(name)?;
        Ok(st.avs[self.0.key].insert(addr))
    }

    /// Removes a peer; operations already posted to it go on.
    pub fn remove(&self, peer: PeerAddr) -> Result<()> {
        self.0.shared.lock()?.avs[self.0.key].remove(peer).map(drop)
    }

    /// The name behind a handle.
    pub fn lookup(&self, peer: PeerAddr) -> Result<Address> {
        self.0.shared.lock()?.avs[self.0.key]
            .lookup(peer)
            .copied()
            .ok_or(Error::AddressNotAvailable)
    }

    /// Number of peers.
    pub fn len(&self) -> Result<usize> {
        Ok(self.0.shared.lock()?.avs[self.0.key].len())
    }

    /// Whether no peer has been inserted.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        match self.shared.lock() {
            Ok(mut st) => {
                st.avs.remove(self.key);
            }
            Err(e) => {
                crate::warn_limited!(error = %e, "address vector dropped where its domain cannot be entered; kept until the domain closes")
            }
        }
    }
}
