//! The historian: folds old conversation into compartments and facts.
