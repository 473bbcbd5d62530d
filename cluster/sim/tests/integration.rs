//! The simulator's own tests, in one binary: a run of the same seed twice is the same run, a
//! fixed set of seeds under every fault passes every check, and bugs planted in the members are
//! found.

mod elections;
mod planted_bugs;
mod seeds;
