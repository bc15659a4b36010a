//! Addresses that keep sending malformed requests, and their penalty.
//!
//! A request refused for how it came (a form header without end, a body too
//! slow, a tus header missing or unreadable: [`crate::error::ApiError::is_offense`])
//! costs the gateway little since the refusal is early, but a client that does
//! nothing else can send hundreds a second, and what each costs the machine
//! (the connection, the kernel's copies, the client's own CPU when it shares the
//! machine) adds up. After `penalty.after_offenses` such refusals from one
//! address within `penalty.window`, the address is penalized for
//! `penalty.duration`. Then each offense of it closes its connection (HTTP/1.1:
//! after the answer, with `Connection: close`; HTTP/2: at once, since one
//! connection carries up to `limits.http2_max_streams` requests at a time), and
//! each new connection from it is held unread until the penalty ends, then
//! answered a bare `429` with `Retry-After` and closed (a tarpit: a client that
//! retries at once gets one attempt per connection per penalty, instead of
//! hundreds a second). Held connections are bounded ([`MAX_HELD`]); beyond
//! that, a penalized address's connections are closed at once. Its requests
//! that are not offenses are served as usual on the connections it has.
//!
//! Addresses are counted whole for IPv4 and by /64 for IPv6 (one host's share
//! of a network), so clients sharing an address (behind one NAT) share one
//! count. Behind a reverse proxy every request comes from the proxy's address,
//! so one bad client would have everyone penalized: list the proxy in
//! `penalty.exempt`, or turn penalties off (`after_offenses = 0`). At most
//! [`MAX_ADDRESSES`] addresses are followed; past that, new ones are not counted
//! until old ones go quiet, looked for at most once every [`PRUNE_EVERY`]
//! (penalties fail open, never on everyone).

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// Addresses followed at once.
pub const MAX_ADDRESSES: usize = 100_000;
/// Connections of penalized addresses held at once; more are closed at once.
pub const MAX_HELD: usize = 1024;
/// Longest `penalty.window` and `penalty.duration`.
pub const MAX_PERIOD: Duration = Duration::from_secs(24 * 3600);
/// Least time between two looks for quiet addresses in a full table.
pub const PRUNE_EVERY: Duration = Duration::from_secs(1);

/// `[penalty]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Penalties")]
pub struct PenaltySettings {
    /// Requests refused as malformed (a broken form or framing, a missing or
    /// unreadable tus header, a body below the minimum rate) that one client
    /// address may get within --penalty-window before it is penalized for
    /// --penalty-duration: its new connections are held, then answered 429.
    /// Behind a reverse proxy, list the proxy in --penalty-exempt or give 0 (off).
    #[arg(id = "penalty.after_offenses", long = "penalty-after-offenses", env = "SLUICE_PENALTY_AFTER_OFFENSES", value_name = "N", default_value = "32", value_parser = crate::values::at_least::<u32>(0))]
    pub after_offenses: u32,
    /// The time offenses are counted over (1s to 24h).
    #[arg(id = "penalty.window", long = "penalty-window", env = "SLUICE_PENALTY_WINDOW", value_name = "DURATION", default_value = "10s", value_parser = crate::values::duration_in(crate::values::SECOND, MAX_PERIOD))]
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// How long a penalty lasts (1s to 24h).
    #[arg(id = "penalty.duration", long = "penalty-duration", env = "SLUICE_PENALTY_DURATION", value_name = "DURATION", default_value = "10s", value_parser = crate::values::duration_in(crate::values::SECOND, MAX_PERIOD))]
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
    /// An address or network (ADDRESS[/BITS]) never penalized, such as a reverse
    /// proxy; repeat or separate with commas [default: none].
    #[arg(
        id = "penalty.exempt",
        long = "penalty-exempt",
        env = "SLUICE_PENALTY_EXEMPT",
        value_name = "ADDRESS[/BITS]",
        value_delimiter = ','
    )]
    pub exempt: Vec<AddressRange>,
}

impl Default for PenaltySettings {
    fn default() -> Self {
        sluice_upload::defaults()
    }
}

/// An address or a network of addresses (`ADDRESS[/PREFIX-BITS]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AddressRange {
    network: IpAddr,
    prefix_bits: u8,
}

impl AddressRange {
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.network, address.to_canonical()) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                masked(u32::from(network).into(), 32, self.prefix_bits)
                    == masked(u32::from(address).into(), 32, self.prefix_bits)
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => {
                masked(network.into(), 128, self.prefix_bits)
                    == masked(address.into(), 128, self.prefix_bits)
            }
            _ => false,
        }
    }
}

/// The first `bits` of a `width`-bit number.
fn masked(value: u128, width: u32, bits: u8) -> u128 {
    match u32::from(bits) {
        0 => 0,
        bits => value >> (width - bits),
    }
}

impl FromStr for AddressRange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let (address, bits) = match text.split_once('/') {
            Some((address, bits)) => (address, Some(bits)),
            None => (text, None),
        };
        let written = IpAddr::from_str(address)
            .map_err(|_| format!("{text:?} is not an IP address or ADDRESS/BITS"))?;
        let width: u8 = if written.is_ipv4() { 32 } else { 128 };
        let prefix_bits = match bits {
            None => width,
            Some(bits) => bits
                .parse::<u8>()
                .ok()
                .filter(|bits| *bits <= width)
                .ok_or_else(|| format!("{text:?}: the prefix must be 0 to {width} bits"))?,
        };
        // An IPv4-mapped network (::ffff:a.b.c.d/n) is the IPv4 network it maps.
        let network = written.to_canonical();
        let prefix_bits = match (written, network) {
            (IpAddr::V6(_), IpAddr::V4(_)) if prefix_bits >= 96 => prefix_bits - 96,
            (IpAddr::V6(_), IpAddr::V4(_)) => {
                return Err(format!(
                    "{text:?}: an IPv4-mapped network needs a prefix of 96 bits or more"
                ))
            }
            _ => prefix_bits,
        };
        Ok(AddressRange {
            network,
            prefix_bits,
        })
    }
}

impl TryFrom<String> for AddressRange {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<AddressRange> for String {
    fn from(range: AddressRange) -> String {
        range.to_string()
    }
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_bits)
    }
}

/// One gateway's count of offenses and penalties, by address.
#[derive(Debug)]
pub struct Offenders {
    settings: PenaltySettings,
    addresses: Mutex<Followed>,
}

/// The addresses followed, and when the table was last pruned.
#[derive(Debug, Default)]
struct Followed {
    conduct: HashMap<IpAddr, Conduct>,
    pruned_at: Option<Instant>,
}

/// What one address did lately.
#[derive(Debug, Clone, Copy)]
struct Conduct {
    /// Offenses since `window_start`.
    offenses: u32,
    window_start: Instant,
    penalized_until: Option<Instant>,
}

impl Conduct {
    fn quiet_at(&self, now: Instant, window: Duration) -> bool {
        now >= self.window_start + window && self.penalized_until.is_none_or(|end| now >= end)
    }
}

/// What became of an address after an offense.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Not (or not yet) penalized.
    Tolerated,
    /// Penalized, for this much longer.
    Penalized(Duration),
}

impl Offenders {
    pub fn new(settings: PenaltySettings) -> Offenders {
        Offenders {
            settings,
            addresses: Mutex::default(),
        }
    }

    fn follows(&self, address: IpAddr) -> bool {
        self.settings.after_offenses > 0
            && !self.settings.exempt.iter().any(|r| r.contains(address))
    }

    /// Counts an offense by `address` at `now`: its standing after it, and
    /// whether this offense got it penalized.
    pub fn offense(&self, address: IpAddr, now: Instant) -> (Standing, bool) {
        if !self.follows(address) {
            return (Standing::Tolerated, false);
        }
        let settings = &self.settings;
        let mut followed = self.addresses.lock().expect("offenders lock");
        let Followed { conduct, pruned_at } = &mut *followed;
        if conduct.len() >= MAX_ADDRESSES && !conduct.contains_key(&counted_as(address)) {
            // Pruning scans every address: at most once per PRUNE_EVERY, or a
            // stream of offenses from new addresses would scan at each one.
            if pruned_at.is_none_or(|at| now >= at + PRUNE_EVERY) {
                conduct.retain(|_, conduct| !conduct.quiet_at(now, settings.window));
                *pruned_at = Some(now);
            }
            if conduct.len() >= MAX_ADDRESSES {
                return (Standing::Tolerated, false);
            }
        }
        let conduct = conduct
            .entry(counted_as(address))
            .or_insert_with(|| Conduct {
                offenses: 0,
                window_start: now,
                penalized_until: None,
            });
        if now >= conduct.window_start + settings.window {
            conduct.offenses = 0;
            conduct.window_start = now;
        }
        let before = standing(conduct, now);
        conduct.offenses += 1;
        if conduct.offenses >= settings.after_offenses {
            conduct.offenses = 0;
            conduct.window_start = now;
            let end = now + settings.duration;
            conduct.penalized_until = Some(conduct.penalized_until.map_or(end, |e| e.max(end)));
        }
        let after = standing(conduct, now);
        (
            after,
            before == Standing::Tolerated && after != Standing::Tolerated,
        )
    }

    /// Whether `address` is penalized at `now`, and for how much longer.
    pub fn standing(&self, address: IpAddr, now: Instant) -> Standing {
        if !self.follows(address) {
            return Standing::Tolerated;
        }
        let followed = self.addresses.lock().expect("offenders lock");
        followed
            .conduct
            .get(&counted_as(address))
            .map_or(Standing::Tolerated, |conduct| standing(conduct, now))
    }
}

fn standing(conduct: &Conduct, now: Instant) -> Standing {
    match conduct.penalized_until {
        Some(end) if end > now => Standing::Penalized(end - now),
        _ => Standing::Tolerated,
    }
}

/// The key an address is counted under: IPv4 whole, IPv6 by its /64.
fn counted_as(address: IpAddr) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(after_offenses: u32, exempt: &[&str]) -> PenaltySettings {
        PenaltySettings {
            after_offenses,
            window: Duration::from_secs(10),
            duration: Duration::from_secs(5),
            exempt: exempt.iter().map(|r| r.parse().unwrap()).collect(),
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    /// One case: offenses as (seconds after the start, address), then the
    /// standing of `asked` at `at` seconds.
    struct Case {
        name: &'static str,
        settings: PenaltySettings,
        offenses: Vec<(u64, &'static str)>,
        asked: &'static str,
        at: u64,
        expected: Standing,
    }

    #[test]
    fn standings() {
        let penalized = |s: u64| Standing::Penalized(Duration::from_secs(s));
        let cases = vec![
            Case {
                name: "below the count",
                settings: settings(3, &[]),
                offenses: vec![(0, "192.0.2.1"), (1, "192.0.2.1")],
                asked: "192.0.2.1",
                at: 1,
                expected: Standing::Tolerated,
            },
            Case {
                name: "at the count",
                settings: settings(3, &[]),
                offenses: vec![(0, "192.0.2.1"), (1, "192.0.2.1"), (2, "192.0.2.1")],
                asked: "192.0.2.1",
                at: 2,
                expected: penalized(5),
            },
            Case {
                name: "the penalty runs down",
                settings: settings(3, &[]),
                offenses: vec![(0, "192.0.2.1"), (0, "192.0.2.1"), (0, "192.0.2.1")],
                asked: "192.0.2.1",
                at: 4,
                expected: penalized(1),
            },
            Case {
                name: "and ends",
                settings: settings(3, &[]),
                offenses: vec![(0, "192.0.2.1"), (0, "192.0.2.1"), (0, "192.0.2.1")],
                asked: "192.0.2.1",
                at: 5,
                expected: Standing::Tolerated,
            },
            Case {
                name: "offenses older than the window are forgotten",
                settings: settings(3, &[]),
                offenses: vec![(0, "192.0.2.1"), (1, "192.0.2.1"), (11, "192.0.2.1")],
                asked: "192.0.2.1",
                at: 11,
                expected: Standing::Tolerated,
            },
            Case {
                name: "another address is not penalized",
                settings: settings(2, &[]),
                offenses: vec![(0, "192.0.2.1"), (0, "192.0.2.1")],
                asked: "192.0.2.2",
                at: 0,
                expected: Standing::Tolerated,
            },
            Case {
                name: "offenses of two addresses do not add up",
                settings: settings(2, &[]),
                offenses: vec![(0, "192.0.2.1"), (0, "192.0.2.2")],
                asked: "192.0.2.1",
                at: 0,
                expected: Standing::Tolerated,
            },
            Case {
                name: "IPv6 counts by /64",
                settings: settings(2, &[]),
                offenses: vec![(0, "2001:db8::1"), (0, "2001:db8::ffff:2")],
                asked: "2001:db8::3",
                at: 0,
                expected: penalized(5),
            },
            Case {
                name: "another /64 is another address",
                settings: settings(2, &[]),
                offenses: vec![(0, "2001:db8::1"), (0, "2001:db8::2")],
                asked: "2001:db8:0:1::1",
                at: 0,
                expected: Standing::Tolerated,
            },
            Case {
                name: "an IPv4-mapped IPv6 address is its IPv4 address",
                settings: settings(2, &[]),
                offenses: vec![(0, "::ffff:192.0.2.1"), (0, "192.0.2.1")],
                asked: "192.0.2.1",
                at: 0,
                expected: penalized(5),
            },
            Case {
                name: "an exempt network is never penalized",
                settings: settings(2, &["10.0.0.0/8"]),
                offenses: vec![(0, "10.1.2.3"), (0, "10.1.2.3"), (0, "10.1.2.3")],
                asked: "10.1.2.3",
                at: 0,
                expected: Standing::Tolerated,
            },
            Case {
                name: "an exempt address exempts only itself",
                settings: settings(2, &["10.0.0.1"]),
                offenses: vec![(0, "10.0.0.2"), (0, "10.0.0.2")],
                asked: "10.0.0.2",
                at: 0,
                expected: penalized(5),
            },
            Case {
                name: "0 turns penalties off",
                settings: settings(0, &[]),
                offenses: vec![(0, "192.0.2.1"); 100],
                asked: "192.0.2.1",
                at: 0,
                expected: Standing::Tolerated,
            },
        ];
        for case in cases {
            let offenders = Offenders::new(case.settings);
            let start = Instant::now();
            for (second, address) in case.offenses {
                offenders.offense(ip(address), start + Duration::from_secs(second));
            }
            let standing = offenders.standing(ip(case.asked), start + Duration::from_secs(case.at));
            assert_eq!(standing, case.expected, "{}", case.name);
        }
    }

    #[test]
    fn the_offense_that_penalizes_says_so() {
        let offenders = Offenders::new(settings(2, &[]));
        let now = Instant::now();
        let penalized = Standing::Penalized(Duration::from_secs(5));
        let later = now + Duration::from_secs(1);
        let expected = [
            (now, (Standing::Tolerated, false)),
            (now, (penalized, true)),
            (later, (Standing::Penalized(Duration::from_secs(4)), false)),
            (later, (Standing::Penalized(Duration::from_secs(5)), false)),
        ];
        for (n, (at, outcome)) in expected.into_iter().enumerate() {
            assert_eq!(
                offenders.offense(ip("192.0.2.1"), at),
                outcome,
                "offense {n}"
            );
        }
    }

    #[test]
    fn address_ranges() {
        let cases: Vec<(&str, Result<&str, &str>)> = vec![
            ("10.0.0.0/8", Ok("10.0.0.0/8")),
            ("192.0.2.7", Ok("192.0.2.7/32")),
            ("::1", Ok("::1/128")),
            ("fd00::/8", Ok("fd00::/8")),
            ("::ffff:10.0.0.1", Ok("10.0.0.1/32")),
            ("::ffff:10.0.0.0/104", Ok("10.0.0.0/8")),
            (" 10.0.0.1 ", Ok("10.0.0.1/32")),
            (
                "::ffff:10.0.0.0/64",
                Err("needs a prefix of 96 bits or more"),
            ),
            ("0.0.0.0/0", Ok("0.0.0.0/0")),
            ("10.0.0.0/33", Err("the prefix must be 0 to 32 bits")),
            ("fd00::/129", Err("the prefix must be 0 to 128 bits")),
            ("10.0.0.0/x", Err("the prefix must be")),
            ("proxy.internal", Err("is not an IP address")),
        ];
        for (text, expected) in cases {
            match (text.parse::<AddressRange>(), expected) {
                (Ok(range), Ok(shown)) => assert_eq!(range.to_string(), shown, "{text}"),
                (Err(error), Err(part)) => assert!(error.contains(part), "{text}: {error}"),
                (got, expected) => panic!("{text}: {got:?}, expected {expected:?}"),
            }
        }
        let memberships = [
            ("10.0.0.0/8", "10.255.0.1", true),
            ("10.0.0.0/8", "11.0.0.1", false),
            ("0.0.0.0/0", "203.0.113.9", true),
            ("0.0.0.0/0", "::1", false),
            ("fd00::/8", "fd12::1", true),
            ("fd00::/8", "fe80::1", false),
            ("192.0.2.7", "::ffff:192.0.2.7", true),
        ];
        for (range, address, inside) in memberships {
            let range: AddressRange = range.parse().unwrap();
            assert_eq!(range.contains(ip(address)), inside, "{range} ∋ {address}");
        }
    }

    #[test]
    fn followed_addresses_are_bounded_and_quiet_ones_make_room() {
        let offenders = Offenders::new(settings(1, &[]));
        let start = Instant::now();
        for n in 0..MAX_ADDRESSES as u32 {
            offenders.offense(IpAddr::from(n.to_be_bytes()), start);
        }
        let newcomer = ip("255.255.255.255");
        let at = |millis: u64| start + Duration::from_millis(millis);
        // Every address goes quiet at 10 s (its window ends; its penalty ended at 5 s).
        let attempts = [
            (
                9_800,
                false,
                "no room while every followed address is active",
            ),
            (10_300, false, "all quiet, but the last look was 0.5 s ago"),
            (10_800, true, "a look a second later makes room"),
        ];
        for (millis, penalized, why) in attempts {
            assert_eq!(
                offenders.offense(newcomer, at(millis)).1,
                penalized,
                "{why}"
            );
        }
        assert!(offenders.addresses.lock().unwrap().conduct.len() < 10);
    }
}
