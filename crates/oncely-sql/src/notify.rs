//! `LISTEN` for code that wakes on a `NOTIFY` (the outbox relay), where the pool's
//! [`Engine`](crate::Engine) says notifications reach it ([`Engine::notifies`]: PostgreSQL,
//! not in portable mode, so not behind a transaction pooler or on a distributed engine).

use crate::any::AnyPool;
use crate::connect::PoolKind;
use crate::error::db;
use oncely_core::Result;

/// A dedicated connection listening on one channel ([`AnyPool::listen`]).
pub struct Listener {
    #[cfg(feature = "postgres")]
    inner: sqlx::postgres::PgListener,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").finish_non_exhaustive()
    }
}

impl AnyPool {
    /// A listener on `channel`, or `None` where the engine sends no notifications
    /// ([`Engine::notifies`](crate::Engine::notifies)): the caller polls instead.
    ///
    /// ```no_run
    /// # async fn f(pool: oncely_sql::AnyPool) -> oncely_core::Result<()> {
    /// if let Some(mut listener) = pool.listen("oncely_outbox").await? {
    ///     listener.recv().await?; // a NOTIFY on the channel
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn listen(&self, channel: &str) -> Result<Option<Listener>> {
        if !self.engine().notifies() {
            return Ok(None);
        }
        match self.__kind() {
            #[cfg(feature = "postgres")]
            PoolKind::Postgres(pool) => {
                let mut inner = sqlx::postgres::PgListener::connect_with(pool)
                    .await
                    .map_err(|e| db("opening a LISTEN connection", e))?;
                inner.listen(channel).await.map_err(|e| db("LISTEN", e))?;
                Ok(Some(Listener { inner }))
            }
            #[allow(unreachable_patterns)]
            _ => Ok(None),
        }
    }
}

impl Listener {
    /// Waits for the next notification on the channel. An error means the connection was
    /// lost: listen again (notifications sent meanwhile are lost, so look for work first).
    pub async fn recv(&mut self) -> Result<()> {
        #[cfg(feature = "postgres")]
        {
            self.inner
                .recv()
                .await
                .map(drop)
                .map_err(|e| db("waiting for a notification", e))
        }
        #[cfg(not(feature = "postgres"))]
        {
            std::future::pending().await
        }
    }
}
