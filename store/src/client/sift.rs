//! A batch sifted by the argument checks: the items that go to the master, and the refusal of
//! each other item in its place, so that a bad item is answered `InvalidParams` as the master
//! would answer it, without a round trip, and the others as if it were not there.

use crate::error::{Error, Result};

/// The items of a batch that passed `check`, and per position the refusal of one that did not.
pub(crate) struct Sifted<'a, T> {
    /// The items that passed, in order.
    pub(crate) passed: Vec<&'a T>,
    refused: Vec<Option<Error>>,
}

impl<'a, T> Sifted<'a, T> {
    /// Sifts `items` with `check`.
    pub(crate) fn new(items: &'a [T], check: impl Fn(&T) -> Result<()>) -> Self {
        let mut passed = Vec::with_capacity(items.len());
        let refused = items
            .iter()
            .map(|item| match check(item) {
                Ok(()) => {
                    passed.push(item);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_keep_their_places_and_results_fill_the_rest() {
        let items = ["a", "", "b", ""];
        let sifted = Sifted::new(&items, |k| crate::args::key(k));
        assert_eq!(sifted.passed, [&"a", &"b"]);
        let merged = sifted.merge([Ok(1), Ok(2)]);
        let codes: Vec<_> = merged
            .iter()
            .map(|r| r.as_ref().map_err(Error::code))
            .collect();
        assert_eq!(codes, [Ok(&1), Err(-600), Ok(&2), Err(-600)]);
        let short = Sifted::new(&items, |k| crate::args::key(k)).merge([Ok(1)]);
        assert_eq!(
            short[2].as_ref().unwrap_err().code(),
            -1,
            "a missing answer is Internal"
        );
    }
}
