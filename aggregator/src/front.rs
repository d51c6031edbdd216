//! placeholder
pub struct ConcurrentAggregator;
