//! The one place the aggregator's concurrent front gets its sync primitives from, so a
//! `--cfg loom` build swaps every lock and thread for loom's model-checked versions.
