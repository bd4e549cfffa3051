//! A batch sifted by the argument checks: the items that go to the master, and the refusal of
//! each other item in its place, so that a bad item is answered `InvalidParams` as the master
//! would answer it, without a round trip, and the others as if it were not there.

use crate::args;
use crate::error::{Error, Result};

/// What passed the checks of a batch (each item turned into what the call owns), and per
/// position the refusal of an item that did not.
pub(crate) struct Sifted<T> {
    /// What the items that passed became, in order.
    pub(crate) passed: Vec<T>,
    refused: Vec<Option<Error>>,
}

impl<T> Sifted<T> {
    /// Sifts `items` with `check`, which refuses an item or turns it into what the call keeps.
    pub(crate) fn new<I>(
        items: impl IntoIterator<Item = I>,
        mut check: impl FnMut(I) -> Result<T>,
    ) -> Self {
        let mut passed = Vec::new();
        let refused = items
            .into_iter()
            .map(|item| match check(item) {
                Ok(kept) => {
                    passed.push(kept);
                    None
                }
                Err(e) => Some(e),
            })
            .collect();
        Sifted { passed, refused }
    }

    /// The batch's results in its order: each refusal in its item's place, and the results of
    /// the passed items, in their order, in the others.
    pub(crate) fn merge<R>(self, results: impl IntoIterator<Item = Result<R>>) -> Vec<Result<R>> {
        let mut results = results.into_iter();
        self.refused
            .into_iter()
            .map(|refused| match refused {
                Some(e) => Err(e),
                None => results.next().unwrap_or_else(|| {
                    Err(Error::Internal {
                        reason: "the master answered fewer results than asked".into(),
                    })
                }),
            })
            .collect()
    }
}

/// A batch of keys sifted by [`args::key`], the keys that passed owned.
pub(crate) fn keys<K: AsRef<str>>(keys: &[K]) -> Sifted<String> {
    Sifted::new(keys, |k| {
        args::key(k.as_ref())?;
        Ok(k.as_ref().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_keep_their_places_and_results_fill_the_rest() {
        let items = ["a", "", "b", ""];
        let sifted = keys(&items);
        assert_eq!(sifted.passed, ["a", "b"]);
        let merged = sifted.merge([Ok(1), Ok(2)]);
        let codes: Vec<_> = merged
            .iter()
            .map(|r| r.as_ref().map_err(Error::code))
            .collect();
        assert_eq!(codes, [Ok(&1), Err(-600), Ok(&2), Err(-600)]);
        let short = keys(&items).merge([Ok(1)]);
        assert_eq!(
            short[2].as_ref().unwrap_err().code(),
            -1,
            "a missing answer is Internal"
        );
    }
}
