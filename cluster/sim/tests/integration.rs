//! The simulator's own tests, in one binary: a run of the same seed twice is the same run,
//! and a fixed set of seeds under every fault passes every check.

mod seeds;
