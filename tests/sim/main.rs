//! The simulator (feature `sim`): every strategy's run against its
//! documented guarantee, and the charts in `docs/sim/`.
//!
//! One test binary.

mod simulate;
