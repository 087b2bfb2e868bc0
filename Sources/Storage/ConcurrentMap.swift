import Dispatch
import Foundation

/// Maps items on several threads at once, for the start-up's loads (a page of rows decoded or its
/// hashes opened on every core): part `p` of `states.count` maps one contiguous share of the items
/// with `states[p]`, what only one thread may use (an opener). Blocks until every part is done.
enum ConcurrentMap {
    /// Threads a load uses: the cores, up to 8.
    static let threads = min(8, max(1, ProcessInfo.processInfo.activeProcessorCount))

    /// `transform(state, index)` for each index below `count`, in order (nil where it gave none).
    /// Throws the first error a part met; that part stops there.
    static func map<State, T>(count: Int, states: [State], _ transform: @escaping (State, Int) throws -> T?) throws -> [T?] {
        precondition(!states.isEmpty, "a map needs a state per part")
        let work = Work(count: count, states: states, transform: transform)
        if states.count == 1 || count < 2 * states.count {
            work.run(part: nil)
        } else {
            DispatchQueue.concurrentPerform(iterations: states.count) { part in work.run(part: part) }
        }
        if let failure = work.failures.lazy.compactMap({ $0 }).first { throw failure }
        return Array(work.results)
    }

    /// The parts' shared slots. @unchecked Sendable: each part writes only its own share of
    /// `results` and its own `failures` slot, read once every part is done.
    private final class Work<State, T>: @unchecked Sendable {
        let count: Int
        let states: [State]
        let transform: (State, Int) throws -> T?
        let share: Int
        let results: UnsafeMutableBufferPointer<T?>
        let failures: UnsafeMutableBufferPointer<(any Error)?>

        init(count: Int, states: [State], transform: @escaping (State, Int) throws -> T?) {
            self.count = count
            self.states = states
            self.transform = transform
            share = (count + states.count - 1) / states.count
            results = .allocate(capacity: count)
            results.initialize(repeating: nil)
            failures = .allocate(capacity: states.count)
            failures.initialize(repeating: nil)
        }

        deinit {
            results.deinitialize().deallocate()
            failures.deinitialize().deallocate()
        }

        /// One part's share; every item with the first state when `part` is nil.
        func run(part: Int?) {
            let slot = part ?? 0
            let range = part.map { min(count, $0 * share)..<min(count, ($0 + 1) * share) } ?? 0..<count
            for index in range {
                do {
                    results[index] = try transform(states[slot], index)
                } catch {
                    failures[slot] = error
                    return
                }
            }
        }
    }
}
