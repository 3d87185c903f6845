//! `Relay`: a loopback TCP relay that proxies reach PostgreSQL through, so a test can make
//! the database unreachable (`cut`: every connection dropped, every new one closed at once)
//! and reachable again (`restore`) without touching the server that other tests share.
//!
//! It runs on a runtime of its own (one thread), so it keeps relaying while the test's own
//! runtime is busy or blocked (a process wait, a `psql` run).

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running relay to `target`; dropping it closes every connection.
pub struct Relay {
    addr: SocketAddr,
    up: watch::Sender<bool>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Relay {
    /// Starts relaying 127.0.0.1:PORT (a free port) to `target`.
    pub fn start(target: SocketAddr) -> Relay {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("relay")
            .enable_all()
            .build()
            .expect("relay runtime");
        // Bound here (not inside the runtime) so the port is known before `start` returns;
        // `block_on` is not allowed inside the test's own runtime.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("relay address");
        let up = watch::Sender::new(true);
        let accepting = up.clone();
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("relay listener");
            accept_loop(listener, target, accepting).await;
        });
        Relay {
            addr,
            up,
            runtime: Some(runtime),
        }
    }

    /// Where clients connect instead of `target`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The database becomes unreachable: every relayed connection is closed now, and every
    /// new one is closed as soon as it is accepted, until `restore`.
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    /// The database is reachable again (for new connections; cut ones stay closed).
    pub fn restore(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.up.send_replace(false);
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, up: watch::Sender<bool>) {
    while let Ok((client, _)) = listener.accept().await {
        if !*up.borrow() {
            drop(client);
            continue;
        }
        tokio::spawn(relay(client, target, up.subscribe()));
    }
}

/// Copies both ways until either side closes or the relay is cut (then both sockets drop).
async fn relay(mut client: TcpStream, target: SocketAddr, mut up: watch::Receiver<bool>) {
    let Ok(mut server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = up.wait_for(|up| !*up) => {}
    }
}
