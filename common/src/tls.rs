//! TLS for the services' listeners (docs/security.md): a certificate chain
//! and its private key from PEM files, and an accepting listener that
//! `axum::serve` takes in place of a TCP one.
//!
//! Handshakes run each on a task of their own, so a client that stalls in
//! its handshake holds up no other; one that fails is logged and dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;

/// `--tls-cert` and `--tls-key`: with both, the service's listeners take
/// TLS only.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// The server's certificate chain (PEM), leaf first.
    #[arg(long, env = "GPULEDGER_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of `--tls-cert` (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "GPULEDGER_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// A service's TLS identity, ready to accept connections: for HTTP
/// (ALPN `http/1.1`) and for the PostgreSQL protocol (ALPN `postgresql`,
/// which libpq 17 and later ask for).
#[derive(Clone)]
pub struct ServerTls {
    pub acceptor: TlsAcceptor,
    pub postgres: TlsAcceptor,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerTls")
    }
}

impl TlsArgs {
    /// The identity these files make, if TLS was asked for.
    pub fn server(&self) -> Result<Option<ServerTls>, String> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Ok(Some(ServerTls {
                acceptor: acceptor(cert, key, b"http/1.1")?,
                postgres: acceptor(cert, key, b"postgresql")?,
            })),
            _ => Ok(None),
        }
    }
}

/// An acceptor for the chain in `cert` and the key in `key`, offering the
/// application protocol `alpn`.
pub fn acceptor(cert: &Path, key: &Path, alpn: &[u8]) -> Result<TlsAcceptor, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "--tls-cert {}: no certificate in it",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("--tls-key {}: {e}", key.display()))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("--tls-cert and --tls-key do not make a server identity: {e}"))?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// How long a client may take over its handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// A TCP listener whose connections are handed on once their TLS
/// handshake is done.
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener` with `tls`, until the listener is dropped.
    pub fn new(listener: TcpListener, tls: &ServerTls) -> std::io::Result<Self> {
        let acceptor = tls.acceptor.clone();
        let local = listener.local_addr()?;
        let (done, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (socket, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if done.is_closed() {
                    return;
                }
                let (acceptor, handed) = (acceptor.clone(), done.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE, acceptor.accept(socket)).await {
                        Ok(Ok(stream)) => {
                            let _ = handed.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accepting task ends only when this listener is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
