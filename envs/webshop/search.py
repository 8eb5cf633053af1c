"""A pure-Python (numpy-vectorized) BM25 index: WebShop's pyserini search without a JVM.

Scoring is Okapi BM25 with Lucene's idf, `idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`, and pyserini's default
k1 = 0.9, b = 0.4. Every (term, document) contribution `idf · tf·(k1+1) / (tf + k1·(1 - b + b·dl/avgdl))` is
precomputed at build time, so a query only adds a few postings arrays into a score vector: O(sum of the query
terms' document frequencies) plus one O(N) scan for the non-zero scores. Ties are broken by document id, and the
catalog orders documents by ASIN, which gives WebShop's "ties by asin". Tokens: lower-case, split on
non-alphanumerics.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np

TOKEN_RE = re.compile(r"[a-z0-9]+")
K1 = 0.9
B = 0.4


def tokenize(text: str) -> list[str]:
    """Lower-case alphanumeric runs."""
    return TOKEN_RE.findall(text.lower())


class BM25Index:
    """BM25 over tokenized documents; `search(query, k)` -> up to k document ids, best first.

    postings[term] = (doc ids int32 [df], contributions float64 [df]) with df the term's document frequency.
    """

    def __init__(self, docs: list[list[str]], k1: float = K1, b: float = B) -> None:
        self.num_docs = len(docs)
        self.k1, self.b = k1, b
        lengths = [len(d) for d in docs]
        avgdl = (sum(lengths) / len(lengths)) if docs and sum(lengths) else 1.0
        raw: dict[str, tuple[list[int], list[int]]] = {}
        for doc_id, tokens in enumerate(docs):
            for term, tf in Counter(tokens).items():
                entry = raw.get(term)
                if entry is None:
                    entry = raw[term] = ([], [])
                entry[0].append(doc_id)
                entry[1].append(tf)
        norm = k1 * (1.0 - b + b * np.asarray(lengths, dtype=np.float64) / avgdl)  # (N,)
        self.postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.idf: dict[str, float] = {}
        n = self.num_docs
        for term, (ids, tfs) in raw.items():
            idf = math.log(1.0 + (n - len(ids) + 0.5) / (len(ids) + 0.5))
            doc_ids = np.asarray(ids, dtype=np.int32)
            tf = np.asarray(tfs, dtype=np.float64)
            self.postings[term] = (doc_ids, idf * tf * (k1 + 1.0) / (tf + norm[doc_ids]))
            self.idf[term] = idf
        self.avgdl = avgdl
        self.doc_lengths = lengths

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for `query` (repeated query terms count once per occurrence). (N,)"""
        scores = np.zeros(self.num_docs, dtype=np.float64)
        for term, qtf in Counter(tokenize(query)).items():
            posting = self.postings.get(term)
            if posting is not None:
                scores[posting[0]] += qtf * posting[1]
        return scores

    def search(self, query: str, k: int = 50) -> list[int]:
        """The k best documents with a positive score, ordered by (score descending, document id)."""
        scores = self.scores(query)
        cand = np.flatnonzero(scores > 0.0)
        if cand.size > k:
            s = scores[cand]
            kth = np.partition(s, cand.size - k)[cand.size - k]  # the k-th largest score
            cand = cand[s >= kth]  # keeps every tie at the boundary, resolved by id below
        order = np.lexsort((cand, -scores[cand]))[:k]
        return cand[order].tolist()
