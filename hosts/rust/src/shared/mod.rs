//! Shared keys: one limit across processes, through a store.
