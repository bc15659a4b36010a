//! Reading one piece of a sequential source (a part, or the body of a small
//! object) into memory that is reserved as its bytes arrive.
//!
//! Nothing is reserved until the source has a first byte to give: a client that
//! has sent nothing holds nothing. Then a *floor* is reserved, at most S3's
//! minimum part size (5 MiB; a small piece's whole length), and the piece is read
//! in buffers of [`CHUNK`] bytes. Past the floor, each buffer's memory is taken
//! only if it is free right now; when it is not, the piece is *cut* there (it
//! holds at least the minimum part size, so it is a valid part) and the caller
//! sends it. So a reader never waits for memory while it holds bytes that wait
//! for it, and uploads cannot deadlock each other on the budget: the only waits
//! are for the floor, made while holding nothing unsent.
//!
//! Two exceptions, chosen by the caller through [`PieceRules`]: pieces that must
//! keep their size (R2's equal parts, or a part near S3's 10,000-part limit) wait
//! for growth instead of cutting, and a caller that already holds unsent bytes
//! asks for the floor only if it is free now ([`PieceRules::without_waiting`]).

use std::io;

use bytes::Bytes;
use sluice_store::limits::MIN_PART_SIZE;

use sluice_store::limits;

use crate::budget::{MemoryShare, Reservation};
use crate::config::MIB;
use crate::source::PartReader;

/// Pieces are made of buffers of this size (recycled by the budget's pool).
pub(crate) const CHUNK: u64 = MIB;

/// How one piece may be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PieceRules {
    /// Bytes to read at most.
    pub want: u64,
    /// Bytes the caller puts in front of this piece (carried from earlier), held
    /// under the reservation passed in; they count toward the floor and the cut.
    pub front: u64,
    /// Bytes (front included) reserved when the first byte arrives.
    pub floor: u64,
    /// The piece (front included) may be cut short once it holds this many bytes;
    /// below, growth waits for memory. `u64::MAX`: never cut.
    pub min_cut: u64,
    /// Whether the floor may be waited for.
    pub may_wait: bool,
}

impl PieceRules {
    /// A part, or a small object's body, that may be cut at the minimum part size.
    pub(crate) fn part(want: u64) -> Self {
        PieceRules {
            want,
            front: 0,
            floor: want.min(MIN_PART_SIZE),
            min_cut: MIN_PART_SIZE,
            may_wait: true,
        }
    }

    /// A piece that is read whole: its memory is reserved at its first byte.
    pub(crate) fn whole(want: u64) -> Self {
        PieceRules {
            want,
            front: 0,
            floor: want,
            min_cut: u64::MAX,
            may_wait: true,
        }
    }

    /// With `front` bytes in front of the piece.
    pub(crate) fn after(mut self, front: u64) -> Self {
        self.front = front;
        self.floor = match self.min_cut {
            u64::MAX => front + self.want,
            _ => (front + self.want).min(MIN_PART_SIZE.max(front)),
        };
        self
    }

    /// Never cut below `bytes` (front included).
    pub(crate) fn cut_no_earlier_than(mut self, bytes: u64) -> Self {
        self.min_cut = self.min_cut.max(bytes);
        self
    }

    /// The floor is taken only if it is free now; otherwise nothing is read.
    pub(crate) fn without_waiting(mut self) -> Self {
        self.may_wait = false;
        self
    }
}

/// Why reading a piece stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PieceEnd {
    /// It holds `want` bytes.
    Full,
    /// The source ended (or failed, see [`Piece::error`]) within it.
    SourceEnded,
    /// Memory was short past the cut point: the piece is shorter than wanted,
    /// the source goes on.
    Cut,
    /// The floor was not free and the rules said not to wait: nothing was read.
    Starved,
}

/// Bytes read for one piece, and the memory holding them (and the front).
#[derive(Debug)]
pub(crate) struct Piece {
    pub chunks: Vec<Bytes>,
    pub len: u64,
    pub reservation: Reservation,
    pub end: PieceEnd,
    /// The source's failure, which ended the piece after `len` bytes.
    pub error: Option<io::Error>,
}

impl PartReader<'_> {
    /// Reads one piece under `rules`, reserving memory from `share` as its bytes
    /// arrive; `held` covers the front bytes and comes back inside the piece's
    /// reservation, which is trimmed to what the piece and front hold.
    pub(crate) async fn read_piece(
        &mut self,
        share: &MemoryShare,
        rules: PieceRules,
        mut held: Reservation,
    ) -> Piece {
        let mut piece = Piece {
            chunks: Vec::new(),
            len: 0,
            reservation: share.nothing(),
            end: PieceEnd::Full,
            error: None,
        };
        if rules.want == 0 {
            piece.reservation = held;
            return piece;
        }
        match self.has_data().await {
            Ok(true) => {}
            Ok(false) => {
                piece.reservation = held;
                piece.end = PieceEnd::SourceEnded;
                return piece;
            }
            Err(error) => {
                piece.reservation = held;
                piece.end = PieceEnd::SourceEnded;
                piece.error = Some(error);
                return piece;
            }
        }
        let floor = rules.floor.saturating_sub(held.bytes());
        if floor > 0 {
            let reserved = match rules.may_wait {
                true => Some(share.reserve(floor).await),
                false => share.try_reserve(floor),
            };
            match reserved {
                Some(reservation) => held.absorb(reservation),
                None => {
                    piece.reservation = held;
                    piece.end = PieceEnd::Starved;
                    return piece;
                }
            }
        }
        piece.reservation = held;
        let budget = share.budget();
        loop {
            if piece.len == rules.want {
                piece.end = PieceEnd::Full;
                break;
            }
            let chunk_len = CHUNK.min(rules.want - piece.len);
            let total = rules.front + piece.len;
            let short = (total + chunk_len).saturating_sub(piece.reservation.bytes());
            if short > 0 {
                match share.try_reserve(short) {
                    Some(more) => piece.reservation.absorb(more),
                    None if total >= rules.min_cut => {
                        piece.end = PieceEnd::Cut;
                        break;
                    }
                    None => piece.reservation.absorb(share.reserve(short).await),
                }
            }
            let mut buffer = budget.buffer(chunk_len as usize);
            let filled = self.fill(buffer.as_vec_mut(), chunk_len as usize).await;
            let got = buffer.len() as u64;
            piece.len += got;
            if got > 0 {
                piece
                    .chunks
                    .push(tail_or_whole(buffer.freeze(), got < chunk_len));
            }
            if let Err(error) = filled {
                piece.error = Some(error);
                piece.end = PieceEnd::SourceEnded;
                break;
            }
            if got < chunk_len {
                piece.end = PieceEnd::SourceEnded;
                break;
            }
        }
        piece.reservation.shrink_to(rules.front + piece.len);
        piece
    }
}

/// A last buffer filled to less than half is copied out, so that the bytes held
/// are what the reservation (trimmed to the bytes) counts, not the buffer's size.
fn tail_or_whole(bytes: Bytes, short: bool) -> Bytes {
    match short && bytes.len() < CHUNK as usize / 2 {
        true => Bytes::copy_from_slice(&bytes),
        false => bytes,
    }
}

/// The fewest bytes (front included) part `number` may be cut at, so that the
/// `remaining` bytes from its start still fit in the parts left at `part_size`.
pub fn cut_floor(remaining: u64, number: u32, part_size: u64) -> u64 {
    let parts_after = limits::MAX_PARTS.saturating_sub(number) as u64;
    remaining
        .saturating_sub(parts_after.saturating_mul(part_size))
        .max(limits::MIN_PART_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::MemoryBudget;
    use futures::StreamExt;
    use std::time::Duration;

    fn reader_of(
        stream: impl futures::Stream<Item = io::Result<Bytes>> + Send + 'static,
    ) -> PartReader<'static> {
        PartReader::Async(Box::new(tokio_util::io::StreamReader::new(stream.boxed())))
    }

    fn bytes_reader(len: usize) -> PartReader<'static> {
        let chunks: Vec<io::Result<Bytes>> = (0..len.div_ceil(64 * 1024))
            .map(|i| Ok(Bytes::from(vec![7u8; (len - i * 64 * 1024).min(64 * 1024)])))
            .collect();
        reader_of(futures::stream::iter(chunks))
    }

    #[tokio::test]
    async fn nothing_is_reserved_before_the_first_byte() {
        let budget = MemoryBudget::new(64 * MIB);
        let share = budget.share(32 * MIB);
        let (sender, receiver) = futures::channel::mpsc::unbounded::<io::Result<Bytes>>();
        let mut reader = reader_of(receiver);
        let reading = {
            let share = share.clone();
            tokio::spawn(async move {
                reader
                    .read_piece(&share, PieceRules::part(8 * MIB), share.nothing())
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(budget.in_use(), 0, "a silent source holds nothing");
        sender.unbounded_send(Ok(Bytes::from_static(b"x"))).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            budget.in_use(),
            MIN_PART_SIZE,
            "the floor, once a byte is in"
        );
        drop(sender);
        let piece = reading.await.unwrap();
        assert_eq!((piece.len, piece.end), (1, PieceEnd::SourceEnded));
        assert_eq!(piece.reservation.bytes(), 1024, "trimmed to the byte held");
    }

    #[tokio::test]
    async fn pieces_by_memory_free() {
        // (budget MiB, held elsewhere MiB, rules, source MiB) -> (len MiB, end)
        let part = PieceRules::part;
        let cases: Vec<(u64, u64, PieceRules, u64, u64, PieceEnd)> = vec![
            (64, 0, part(8 * MIB), 20, 8, PieceEnd::Full),
            (64, 0, part(8 * MIB), 3, 3, PieceEnd::SourceEnded),
            (64, 58, part(8 * MIB), 20, 6, PieceEnd::Cut),
            (64, 59, part(8 * MIB), 20, 5, PieceEnd::Cut),
            (
                64,
                60,
                part(8 * MIB).without_waiting(),
                20,
                0,
                PieceEnd::Starved,
            ),
            (64, 0, part(8 * MIB).after(3 * MIB), 20, 8, PieceEnd::Full),
            (64, 59, part(8 * MIB).after(3 * MIB), 20, 2, PieceEnd::Cut),
            (64, 0, PieceRules::whole(16 * MIB), 20, 16, PieceEnd::Full),
        ];
        for (budget_mib, elsewhere_mib, rules, source_mib, len_mib, end) in cases {
            let budget = MemoryBudget::new(budget_mib * MIB);
            let share = budget.share(budget_mib * MIB);
            let _elsewhere = budget.reserve(elsewhere_mib * MIB).await;
            let held = share.reserve(rules.front).await;
            let mut reader = bytes_reader((source_mib * MIB) as usize);
            let piece = reader.read_piece(&share, rules, held).await;
            let case = format!("{budget_mib} MiB budget, {elsewhere_mib} held, {rules:?}");
            assert_eq!((piece.len, piece.end), (len_mib * MIB, end), "{case}");
            assert_eq!(
                piece.reservation.bytes(),
                rules.front + piece.len,
                "{case}: the reservation covers exactly the bytes held"
            );
            let chunks: u64 = piece.chunks.iter().map(|c| c.len() as u64).sum();
            assert_eq!(chunks, piece.len, "{case}");
        }
    }

    #[tokio::test]
    async fn a_piece_that_may_not_be_cut_waits_for_memory() {
        let budget = MemoryBudget::new(16 * MIB);
        let share = budget.share(16 * MIB);
        let elsewhere = budget.reserve(10 * MIB).await;
        let reading = {
            let share = share.clone();
            tokio::spawn(async move {
                let mut reader = bytes_reader((10 * MIB) as usize);
                let rules = PieceRules::part(8 * MIB).cut_no_earlier_than(8 * MIB);
                reader.read_piece(&share, rules, share.nothing()).await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !reading.is_finished(),
            "6 MiB free: the piece waits at 6 MiB"
        );
        drop(elsewhere);
        let piece = reading.await.unwrap();
        assert_eq!((piece.len, piece.end), (8 * MIB, PieceEnd::Full));
    }
}
