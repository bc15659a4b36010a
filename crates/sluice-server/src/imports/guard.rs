//! Which URLs an import may fetch: the guard against server-side request
//! forgery. Default deny for everything but public unicast addresses; an
//! operator's allow-list (`imports.allow`: networks or host names) opens
//! exactly what it names. A URL is refused before anything is fetched when it
//! is not http(s), carries credentials, or names (or resolves to) a loopback,
//! private, shared, link-local (cloud metadata included), multicast,
//! unspecified, reserved or documentation address, IPv4-mapped and NAT64 IPv6
//! forms of those included. IPv4 spelled in decimal, octal or hex is read as
//! the address it is (the WHATWG URL parser does it). A host is resolved once
//! and the connection goes to the address that was checked (no second lookup
//! a changed DNS answer could redirect); every redirect is checked again.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use ipnet::IpNet;

/// Why a URL is not fetched (each reason safe to send to the caller).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("not a URL: {0}")]
    Malformed(String),
    #[error("only http and https URLs are imported, not {0}:")]
    Scheme(String),
    #[error("a URL with credentials (user:password@) is not imported")]
    Credentials,
    #[error("the URL has no host")]
    NoHost,
    /// (`ip` is not said for a name: a refusal must not map internal names.)
    #[error("{host} is {reason}{}: imports fetch from public addresses only (an operator may allow it: imports.allow)", if host.parse::<IpAddr>().is_ok() { String::new() } else { " (for this gateway's resolver)".into() })]
    Address {
        host: String,
        ip: IpAddr,
        reason: &'static str,
    },
    #[error("{host} did not resolve: {cause}")]
    Unresolved { host: String, cause: String },
}

/// Non-public address ranges and what they are.
const DENIED_V4: &[(&str, &str)] = &[
    ("0.0.0.0/8", "an unspecified address"),
    ("10.0.0.0/8", "a private address"),
    ("100.64.0.0/10", "a shared (carrier-grade NAT) address"),
    ("127.0.0.0/8", "a loopback address"),
    (
        "169.254.0.0/16",
        "a link-local address (cloud metadata among them)",
    ),
    ("172.16.0.0/12", "a private address"),
    ("192.0.0.0/24", "an IETF protocol address"),
    ("192.0.2.0/24", "a documentation address"),
    ("192.88.99.0/24", "a 6to4 relay address"),
    ("192.168.0.0/16", "a private address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
];

const DENIED_V6: &[(&str, &str)] = &[
    ("::/128", "an unspecified address"),
    ("::1/128", "a loopback address"),
    ("::/96", "an IPv4-compatible address"),
    ("100::/64", "a discard address"),
    ("2001::/23", "an IETF protocol address"),
    ("2001:db8::/32", "a documentation address"),
    ("2002::/16", "a 6to4 address"),
    (
        "fc00::/7",
        "a unique local (private) address (cloud metadata among them)",
    ),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
];

/// What `ip` is when it is no public unicast address.
pub fn denied(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => denied_v4(v4),
        IpAddr::V6(v6) => {
            // IPv4-mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::a.b.c.d) reach
            // the IPv4 address they carry.
            if let Some(v4) = v6.to_ipv4_mapped() {
                return Some(denied_v4(v4).unwrap_or("an IPv4-mapped address"));
            }
            let segments = v6.segments();
            if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let v4 = Ipv4Addr::from(((segments[6] as u32) << 16) | segments[7] as u32);
                return Some(denied_v4(v4).unwrap_or("a NAT64 address"));
            }
            in_table(IpAddr::V6(v6), DENIED_V6)
        }
    }
}

fn denied_v4(ip: Ipv4Addr) -> Option<&'static str> {
    if ip == Ipv4Addr::BROADCAST {
        return Some("the broadcast address");
    }
    in_table(IpAddr::V4(ip), DENIED_V4)
}

fn in_table(ip: IpAddr, table: &[(&str, &'static str)]) -> Option<&'static str> {
    table.iter().find_map(|(net, what)| {
        let net: IpNet = net.parse().expect("the table's networks parse");
        net.contains(&ip).then_some(*what)
    })
}

/// An entry of the operator's allow-list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowed {
    /// Addresses in this network.
    Net(IpNet),
    /// This host name (exactly, case-insensitive), whatever it resolves to.
    Host(String),
}

impl std::str::FromStr for Allowed {
    type Err = String;

    fn from_str(text: &str) -> Result<Allowed, String> {
        let text = text.trim();
        if let Ok(net) = text.parse::<IpNet>() {
            return Ok(Allowed::Net(net));
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Allowed::Net(IpNet::from(ip)));
        }
        let valid = !text.is_empty()
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        match valid {
            true => Ok(Allowed::Host(text.to_ascii_lowercase())),
            false => Err(format!(
                "{text:?} is neither a network (10.0.0.0/8, fd00::/8, 192.0.2.7) nor a host name"
            )),
        }
    }
}

/// Resolves host names (the system's resolver; a test's in unit tests).
#[async_trait::async_trait]
pub trait Resolve: Send + Sync {
    async fn lookup(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
}

/// The system's resolver.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

#[async_trait::async_trait]
impl Resolve for SystemResolver {
    async fn lookup(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// The guard of one gateway: its allow-list.
#[derive(Debug, Clone, Default)]
pub struct ImportGuard {
    allow: Vec<Allowed>,
}

/// A URL that may be fetched, and the one address to connect to for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub url: url::Url,
    pub address: SocketAddr,
}

impl ImportGuard {
    pub fn new(allow: Vec<Allowed>) -> ImportGuard {
        ImportGuard { allow }
    }

    /// The URL, if its form may be fetched (no lookup yet).
    pub fn parse(&self, text: &str) -> Result<url::Url, Refusal> {
        let url = url::Url::parse(text.trim()).map_err(|e| Refusal::Malformed(e.to_string()))?;
        match url.scheme() {
            "http" | "https" => {}
            other => return Err(Refusal::Scheme(other.to_owned())),
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Refusal::Credentials);
        }
        if url.host().is_none() {
            return Err(Refusal::NoHost);
        }
        Ok(url)
    }

    /// Resolves the URL's host once and checks every address it has: the
    /// address to connect to, or why not.
    pub async fn check(&self, url: url::Url, resolver: &dyn Resolve) -> Result<Checked, Refusal> {
        let url = self.parse(url.as_str())?;
        let port = url.port_or_known_default().unwrap_or(80);
        let host = url.host().ok_or(Refusal::NoHost)?;
        let (name, addresses) = match host {
            url::Host::Ipv4(ip) => (ip.to_string(), vec![SocketAddr::new(IpAddr::V4(ip), port)]),
            url::Host::Ipv6(ip) => (ip.to_string(), vec![SocketAddr::new(IpAddr::V6(ip), port)]),
            url::Host::Domain(domain) => {
                let domain = domain.trim_end_matches('.').to_ascii_lowercase();
                let found =
                    resolver
                        .lookup(&domain, port)
                        .await
                        .map_err(|e| Refusal::Unresolved {
                            host: domain.clone(),
                            cause: e.to_string(),
                        })?;
                if found.is_empty() {
                    return Err(Refusal::Unresolved {
                        host: domain,
                        cause: "no address".into(),
                    });
                }
                (domain, found)
            }
        };
        let host_allowed = self
            .allow
            .iter()
            .any(|a| matches!(a, Allowed::Host(h) if h.trim_end_matches('.') == name));
        // Every answer must pass: a name with one private address among public
        // ones is refused (whichever the connection would have taken).
        for address in &addresses {
            let ip = normalized(address.ip());
            let net_allowed = self
                .allow
                .iter()
                .any(|a| matches!(a, Allowed::Net(net) if net.contains(&ip)));
            if host_allowed || net_allowed {
                continue;
            }
            if let Some(reason) = denied(ip) {
                tracing::info!(host = name, %ip, reason, "import refused");
                return Err(Refusal::Address {
                    host: name,
                    ip,
                    reason,
                });
            }
        }
        Ok(Checked {
            url,
            address: addresses[0],
        })
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is (allow-lists name those).
fn normalized(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Answers from a table; a name asked twice gets its second answer (a DNS
    /// answer that changes between check and connect).
    #[derive(Default)]
    struct Scripted {
        answers: HashMap<&'static str, Vec<Vec<IpAddr>>>,
        asked: Mutex<HashMap<String, usize>>,
    }

    #[async_trait::async_trait]
    impl Resolve for Scripted {
        async fn lookup(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
            let mut asked = self.asked.lock().unwrap();
            let n = asked.entry(host.to_owned()).or_default();
            let answers = self
                .answers
                .get(host)
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such host"))?;
            let answer = &answers[(*n).min(answers.len() - 1)];
            *n += 1;
            Ok(answer.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    /// The SSRF table: (URL, what the refusal says, or None when it is fetched).
    const TABLE: &[(&str, Option<&str>)] = &[
        ("http://127.0.0.1/x", Some("loopback")),
        ("http://127.1.2.3:8080/x", Some("loopback")),
        ("http://localhost/x", Some("loopback")),
        ("http://[::1]/x", Some("loopback")),
        ("http://2130706433/x", Some("loopback")),
        ("http://0177.0.0.1/x", Some("loopback")),
        ("http://0x7f.0.0.1/x", Some("loopback")),
        ("http://0x7f000001/x", Some("loopback")),
        ("http://127.1/x", Some("loopback")),
        ("http://0.0.0.0/x", Some("unspecified")),
        ("http://[::]/x", Some("unspecified")),
        ("http://10.1.2.3/x", Some("private")),
        ("http://172.16.0.1/x", Some("private")),
        ("http://172.31.255.255/x", Some("private")),
        ("http://192.168.1.1/x", Some("private")),
        ("http://100.64.0.1/x", Some("shared")),
        (
            "http://169.254.169.254/latest/meta-data/",
            Some("link-local"),
        ),
        (
            "http://[fd00:ec2::254]/latest/meta-data/",
            Some("unique local"),
        ),
        ("http://[fe80::1]/x", Some("link-local")),
        ("http://[fc00::1]/x", Some("unique local")),
        ("http://224.0.0.1/x", Some("multicast")),
        ("http://[ff02::1]/x", Some("multicast")),
        ("http://255.255.255.255/x", Some("broadcast")),
        ("http://240.0.0.1/x", Some("reserved")),
        ("http://[::ffff:127.0.0.1]/x", Some("loopback")),
        ("http://[::ffff:169.254.169.254]/x", Some("link-local")),
        ("http://[::ffff:10.0.0.1]/x", Some("private")),
        ("http://[64:ff9b::a9fe:a9fe]/x", Some("link-local")),
        ("http://[::127.0.0.1]/x", Some("IPv4-compatible")),
        ("http://192.0.2.10/x", Some("documentation")),
        ("http://metadata.internal/x", Some("link-local")),
        ("http://mixed.example/x", Some("private")),
        ("http://rebinding.example/x", None),
        ("http://nowhere.example/x", Some("did not resolve")),
        ("ftp://files.example/x", Some("only http and https")),
        ("file:///etc/passwd", Some("only http and https")),
        ("gopher://public.example/x", Some("only http and https")),
        ("http://user:secret@public.example/x", Some("credentials")),
        ("http://user@public.example/x", Some("credentials")),
        ("not a url", Some("not a URL")),
        ("https://public.example/file.bin", None),
        ("http://93.184.215.14/x", None),
        ("http://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/x", None),
    ];

    fn resolver() -> Scripted {
        let mut answers: HashMap<&'static str, Vec<Vec<IpAddr>>> = HashMap::new();
        answers.insert("localhost", vec![vec![ip("127.0.0.1"), ip("::1")]]);
        answers.insert("metadata.internal", vec![vec![ip("169.254.169.254")]]);
        answers.insert(
            "mixed.example",
            vec![vec![ip("93.184.215.14"), ip("10.0.0.7")]],
        );
        // Public when checked, loopback if it were asked again.
        answers.insert(
            "rebinding.example",
            vec![vec![ip("93.184.215.14")], vec![ip("127.0.0.1")]],
        );
        answers.insert("public.example", vec![vec![ip("93.184.215.14")]]);
        answers.insert("files.example", vec![vec![ip("93.184.215.14")]]);
        Scripted {
            answers,
            ..Scripted::default()
        }
    }

    #[tokio::test]
    async fn the_ssrf_table() {
        assert!(TABLE.len() >= 30);
        let guard = ImportGuard::default();
        let resolver = resolver();
        for (url, refused) in TABLE {
            let checked = match guard.parse(url) {
                Ok(parsed) => guard.check(parsed, &resolver).await,
                Err(refusal) => Err(refusal),
            };
            match (checked, refused) {
                (Err(refusal), Some(words)) => {
                    assert!(refusal.to_string().contains(words), "{url}: {refusal}")
                }
                (Ok(checked), None) => {
                    // The address connected to is the one checked: a second
                    // answer never reaches the connection.
                    if url.contains("rebinding") {
                        assert_eq!(checked.address.ip(), ip("93.184.215.14"), "{url}");
                    }
                    assert!(denied(checked.address.ip()).is_none(), "{url}");
                }
                (got, want) => panic!("{url}: got {got:?}, want refusal {want:?}"),
            }
        }
        // The rebinding name was looked up exactly once.
        assert_eq!(resolver.asked.lock().unwrap()["rebinding.example"], 1);
    }

    #[tokio::test]
    async fn an_allow_list_opens_what_it_names_and_nothing_else() {
        let allow: Vec<Allowed> = ["127.0.0.2/32", "origin.internal", "fd12::/16"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let guard = ImportGuard::new(allow);
        let mut resolver = resolver();
        resolver
            .answers
            .insert("origin.internal", vec![vec![ip("10.9.8.7")]]);
        // (URL, fetched)
        let cases = [
            ("http://127.0.0.2:9000/x", true),
            ("http://[::ffff:127.0.0.2]/x", true),
            ("http://127.0.0.1/x", false),
            ("http://origin.internal/x", true),
            ("http://ORIGIN.internal./x", true),
            ("http://metadata.internal/x", false),
            ("http://[fd12::1]/x", true),
            ("http://[fd00:ec2::254]/x", false),
        ];
        for (url, fetched) in cases {
            let checked = guard.check(guard.parse(url).unwrap(), &resolver).await;
            assert_eq!(checked.is_ok(), fetched, "{url}: {checked:?}");
        }
        let bad = "not a host!".parse::<Allowed>();
        assert!(bad.unwrap_err().contains("neither a network"));
    }
}
