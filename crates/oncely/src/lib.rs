//! oncely
