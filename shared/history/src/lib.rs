//! What the prompt's head is made of: compartments rendered by a decay curve,
//! memories, the user profile, pins; and when a historian run is due.

pub mod decay;
pub mod head;
pub mod store;
pub mod trigger;
