mod cumulative_count;
mod interpolator;

pub use cumulative_count::CumulativeCount;
pub use interpolator::Interpolator;
