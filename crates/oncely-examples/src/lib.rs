//! Runnable examples of oncely live in `examples/` at the repository root; this crate only
//! builds and runs them (`cargo run -p oncely-examples --example order_status`).
