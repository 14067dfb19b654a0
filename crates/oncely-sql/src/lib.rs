//! oncely-sql
