//! The admission controller's typed errors, one small type per operation. Every one means "the
//! host made a mistake and nothing changed". The code enums are deliberately exhaustive: a host
//! adapter that matches on them must stop compiling when a code is added.

codes! {
    /// Why [`Admission::begin`](super::Admission::begin) refused a request.
    BeginErrorCode {
        /// The controller is shut down; nothing is admitted.
        Shutdown => "shutdown",
        /// Another live request (queued or in flight) has this id.
        DuplicateRequest => "duplicate-request",
        /// The id is empty or longer than [`NAME_BYTES_MAX`](crate::limits::NAME_BYTES_MAX)
        /// bytes.
        InvalidId => "invalid-id",
        /// A re-entrant call without a parent, a parent that is not a tool call in flight, or a
        /// parent given for another class.
        InvalidParent => "invalid-parent",
        /// The calls waiting on this re-entrant call hold the whole budget: it could never be
        /// admitted.
        WouldDeadlock => "would-deadlock",
        /// [`REQUESTS_MAX`](crate::limits::REQUESTS_MAX) requests are already live.
        TooMany => "too-many",
    }
}

codes! {
    /// Why [`Admission::end`](super::Admission::end) refused a ticket.
    EndErrorCode {
        /// No live request has this ticket: never handed out, ended, abandoned or refused.
        UnknownRequest => "unknown-request",
        /// The request is still queued (abandon it instead).
        NotAdmitted => "not-admitted",
    }
}

codes! {
    /// Why [`Admission::abandon`](super::Admission::abandon) refused a ticket.
    AbandonErrorCode {
        /// No live request has this ticket: never handed out, ended, abandoned or refused.
        UnknownRequest => "unknown-request",
        /// The host was already told the request is admitted (end it instead).
        NotQueued => "not-queued",
    }
}

error_type!(
    /// A refused [`Admission::begin`](super::Admission::begin); nothing changed and no ticket
    /// was handed out.
    BeginError,
    BeginErrorCode
);
error_type!(
    /// A refused [`Admission::end`](super::Admission::end); nothing changed.
    EndError,
    EndErrorCode
);
error_type!(
    /// A refused [`Admission::abandon`](super::Admission::abandon); nothing changed.
    AbandonError,
    AbandonErrorCode
);
