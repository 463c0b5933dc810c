//! Pins: messages that survive every compaction, and their restoration.
