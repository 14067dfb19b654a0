//! oncely-testkit
