import Foundation

/// A value behind a pthread mutex, with a condition variable that threads wait on until the value
/// is what they need: the one place where PatchSync waits on a condition (the chunk pipeline's
/// queue, the staged files' flusher, the object placer's batches). `Mutex` (Synchronization) has no
/// wait.
///
/// A body that changes what a waiter waits for calls ``broadcast()`` (or ``signal()``, when only
/// one thread can be waiting), inside the body or after it. Not recursive: a body never takes the
/// same lock again.
///
/// Thread-safety: `value` is touched only with `mutex` held. The class owns its pthread handles
/// (pthread_mutex_init and pthread_cond_init in init, destroyed in deinit), hence
/// `@unchecked Sendable`. As with `Mutex`, `State` need not be Sendable; unlike `Mutex`, the bodies
/// take a plain `inout` (the queues hold raw chunk buffers), so what a body takes out of the state
/// is the caller's to own.
final class ConditionLock<State>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private var value: State

    init(_ initial: State) {
        mutex = .allocate(capacity: 1)
        condition = .allocate(capacity: 1)
        value = initial
        let mutexError = pthread_mutex_init(mutex, nil)
        precondition(mutexError == 0, "pthread_mutex_init failed: \(mutexError)")
        let conditionError = pthread_cond_init(condition, nil)
        precondition(conditionError == 0, "pthread_cond_init failed: \(conditionError)")
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` on the state with the lock held.
    func withLock<R, E: Error>(_ body: (inout State) throws(E) -> R) throws(E) -> R {
        lock()
        defer { unlock() }
        return try body(&value)
    }

    /// Waits (pthread_cond_wait) until `ready` holds for the state, then runs `body` on it; the lock
    /// is held throughout, except while waiting.
    func withLock<R>(when ready: (State) -> Bool, _ body: (inout State) -> R) -> R {
        lock()
        defer { unlock() }
        while !ready(value) {
            let error = pthread_cond_wait(condition, mutex)
            precondition(error == 0, "pthread_cond_wait failed: \(error)")
        }
        return body(&value)
    }

    /// Wakes every waiting thread (pthread_cond_broadcast); each checks its condition again.
    func broadcast() {
        pthread_cond_broadcast(condition)
    }

    /// Wakes one waiting thread (pthread_cond_signal): only right when a single thread can be waiting.
    func signal() {
        pthread_cond_signal(condition)
    }

    /// pthread_mutex_lock.
    private func lock() {
        let error = pthread_mutex_lock(mutex)
        precondition(error == 0, "pthread_mutex_lock failed: \(error)")
    }

    /// pthread_mutex_unlock.
    private func unlock() {
        let error = pthread_mutex_unlock(mutex)
        precondition(error == 0, "pthread_mutex_unlock failed: \(error)")
    }
}
