//! The async driver: runs batches of tool calls under a policy.
