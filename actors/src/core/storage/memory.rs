//! In-memory [`Storage`](super::Storage) for the simulator and tests. To be
//! written with the storage issue (#5): loses unsynced writes on crash, and
//! can fail a write or a superblock save on demand.
