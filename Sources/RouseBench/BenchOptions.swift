import Foundation

/// What `rouse-bench` was asked to do, from its command line.
struct BenchOptions {
    /// How long each OPTIONS phase lasts.
    var seconds = 3.0
    /// Where to write the figures as JSON, if anywhere.
    var jsonPath: String?
    /// How the OPTIONS throughput phase releases requests.
    var pacing = UDPLoadGenerator.Pacing.window(64)
    /// Which phases run, in this order: parser, options, register, sipp, posting, push, calls,
    /// scale, profile.
    var phases: Set<String> = phaseNames
    /// libpq conninfo of a scratch database; without it the REGISTER and posting phases are skipped.
    var databaseURL: String?
    /// The `rouse` executable the REGISTER phase starts; by default the one beside rouse-bench.
    var rouseExecutable = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        .appendingPathComponent("rouse").path
    /// The REGISTER comparison: the two extension counts, the length and number of each server's
    /// measured runs, the window (or open-loop rate), TCP connections, modes and transports.
    var registerExtensions = 10_000
    var registerSeconds = 8.0
    var registerWindow = 64
    var registerRate: Double?
    var registerRounds = 2
    var registerFillSeconds = 100.0
    var registerModes: [RegisterComparison.Mode] = [.durable, .memory]
    var registerTransports: [RegisterLoadGenerator.Transport] = [.udp, .tcp]
    var tcpConnections = 64
    var memoryBindings = 100_000
    /// A database like `databaseURL` but with `synchronous_commit=off` (Rouse's fastest setting).
    var memoryDatabaseURL: String?
    /// Kamailio: its executable (nil: Rouse alone), configuration template, database and children.
    var kamailioExecutable: String?
    var kamailioConfig = "bench/kamailio/kamailio.cfg"
    var kamailioDatabaseURL: String?
    var kamailioChildren = 4
    /// Where the dated report (`<YYYY-MM-DD>.md` and `.json`) is written, if anywhere.
    var reportDirectory: String?
    /// REGISTERs counted under callgrind in the profile phase.
    var profileRegisters = 1_000
    /// Hand-written profiling notes (before/after, proposed fixes) copied into the report.
    var profileNotes: String? = "bench/profiling.md"
    /// The push phase: pushes in the throughput pass and how many are in flight.
    var pushCount = 5_000
    var pushWindow = 100
    /// The posting phase: extensions the posts cycle through, length of the measured load and
    /// keep-alive connections.
    var postingExtensions = 1_000
    var postingSeconds = 5.0
    var postingConnections = 8
    /// The calls phase: desk-phone callees, calls in flight and the bounds of the proxy pass, and
    /// the samples of the push and wake latency passes.
    var callsCallees = 1_000
    var callsWindow = 64
    var callsCount = 20_000
    var callsSeconds = 8.0
    var callsPushSamples = 300
    var callsWakeSamples = 200

    /// The SIPp ladders: SIPp itself, the offered rates of each ladder, each step's length, and
    /// the phones and callees they cycle through.
    var sippExecutable = "/usr/bin/sipp"
    var sippRegisterRates: [Double] = [1_000, 2_000, 4_000, 6_000, 8_000, 12_000]
    var sippCallRates: [Double] = [100, 200, 400, 800, 1_200, 1_600, 2_000, 2_400]
    var sippSeconds = 5.0
    var sippPhones = 10_000
    var sippCallees = 1_000
    /// The scale phase: its own database, the bindings loaded, and the REGISTER rate and phones
    /// of its latency runs.
    var scaleDatabaseURL: String?
    var scaleBindings = 1_000_000
    var scaleRate = 1_000.0
    var scalePhones = 10_000
    var scaleSeconds = 8.0
    /// Instructions per REGISTER before this work (issue 21's baseline at main 67c82ed), for the
    /// profile's before/after; replaced by --profile-before.
    var profileBefore = 687_273.0
    /// Instructions per call setup (INVITE to the BYE's 200, with its journey written) and per
    /// posted token before this session's work (e145fc6), for their before/after; replaced by
    /// --profile-before-invite and --profile-before-post.
    var profileBeforeInvite = ProfileBenchmark.beforeInvite
    var profileBeforePost = ProfileBenchmark.beforePost
    /// Calls and token posts counted under callgrind in the profile phase.
    var profileCalls = 300
    var profilePosts = 1_000
    /// `sip_threads` of every Rouse the benchmark starts (nil: Rouse's default, one per core).
    var sipThreads: Int?

    static let phaseNames: Set<String> = ["parser", "options", "register", "sipp", "posting", "push", "calls", "scale", "profile"]

    static let usage = """
        usage: rouse-bench [options]   (`make bench` passes the databases, Kamailio and --report-dir)

          --seconds N   duration of each OPTIONS phase, in seconds (default 3); the parser
                        benchmarks always take about 1.5 s each
          --json FILE   also write the figures to FILE as JSON
          --report-dir DIR  write the report DIR/<YYYY-MM-DD>.md and DIR/<YYYY-MM-DD>.json
          --quick       shorter runs and fewer extensions, for trying things (not for publishing)
          --window N    requests kept in flight in the OPTIONS throughput phase (default 64)
          --rate R      instead of a window, send R OPTIONS requests per second
          --phases LIST comma list of parser, options, register, sipp, posting, push, calls,
                        scale, profile (default all)
          --sip-threads N  sip_threads of every rouse the bench starts (default: Rouse's own,
                        one per core); 1 against 2 compares one SIP loop with two

        REGISTER comparison (needs PostgreSQL; `make bench` starts one and passes its databases):
          --database-url CONNINFO   Rouse's scratch database (synchronous_commit on); without it
                                    the register, posting and calls phases are skipped
          --memory-database-url CONNINFO  the same with synchronous_commit=off: Rouse's fastest
                                    setting, set beside Kamailio in memory (db_mode 0)
          --rouse PATH              the rouse executable to serve (default: beside rouse-bench)
          --kamailio PATH           the kamailio executable; without it Rouse runs alone
          --kamailio-config FILE    configuration template (default bench/kamailio/kamailio.cfg)
          --kamailio-database-url CONNINFO  Kamailio's database (its subscriber and location
                                    tables), in the same cluster
          --kamailio-children N     Kamailio's UDP receivers and TCP workers (default 4)
          --register-extensions N   phones of the small cell (default 10000)
          --memory-bindings N       phones of the large cell, and bindings held for the memory
                                    figures (default 100000)
          --register-seconds N      length of each measured run (default 8)
          --register-rounds N       measured runs per server and cell, interleaved (default 2);
                                    also the runs per server of the calls' proxy pass
          --register-fill-seconds N most seconds a pass registering new phones takes (default 100)
          --register-window N       REGISTERs kept in flight, closed loop (default 64)
          --register-rate R         open loop instead: R REGISTERs per second
          --register-modes LIST     durable, memory (default both)
          --register-transports LIST  udp, tcp (default both)
          --tcp-connections N       TCP connections the phones share (default 64)

        sipp phase (SIPp ladders against Rouse durable, Kamailio in memory and durable; needs
        --database-url, and --kamailio for the rivals):
          --sipp PATH               the SIPp executable (default /usr/bin/sipp)
          --sipp-register-rates LIST  registrations per second offered, step by step
                                    (default 1000,2000,4000,6000,8000,12000)
          --sipp-call-rates LIST    call setups per second offered (default 100,200,400,800,1200,1600,2000,2400)
          --sipp-seconds N          length of each step (default 5)
          --sipp-phones N           phones the register ladder cycles through (default 10000)
          --sipp-callees N          extensions the call ladder calls in turn (default 1000)

        scale phase (one instance holding many bindings; needs --scale-database-url):
          --scale-database-url CONNINFO  a database of its own (synchronous_commit on)
          --scale-bindings N        bindings bulk-inserted before Rouse starts (default 1000000)
          --scale-rate R            REGISTERs per second of its latency runs (default 1000)
          --scale-phones N          phones of its latency runs (default 10000)
          --scale-seconds N         length of each latency run (default 8)

        posting phase (POST /api/v1/push/register over HTTP/1.1 keep-alive; needs --database-url):
          --posting-extensions N    extensions the posts cycle through (default 1000)
          --posting-seconds N       length of the measured posting load (default 5); then SIP
                                    OPTIONS latency is measured for 2 s idle and 2 s under posts
          --posting-connections N   keep-alive connections, one post in flight each (default 8)

        push phase (needs the stand-ins' Python venv, scripts/standins-venv.sh, and curl):
          --push-count N            pushes in the throughput pass, at most 10 s (default 5000)
          --push-window N           pushes in flight on the one HTTP/2 connection (default 100)

        calls phase (INVITEs through rouse serve, and through Kamailio when given; needs
        --database-url, and the stand-ins' venv for the push and wake passes):
          --calls-callees N         extensions with a desk phone over UDP that the proxy pass
                                    calls in turn (default 1000)
          --calls-window N          calls in flight in the proxy pass, INVITE to BYE (default 64)
          --calls-count N           most calls of each proxy run (default 20000)
          --calls-seconds N         most seconds each proxy run places calls (default 8)
          --calls-push-samples N    calls, one at a time, timed INVITE → push at the APNs
                                    stand-in (default 300, at most 10 s)
          --calls-wake-samples N    calls, one at a time, timed woken REGISTER → INVITE,
                                    every other one with its wake credential (default 200,
                                    at most 25 s)

        profile phase (valgrind's callgrind on rouse serve; needs --database-url and valgrind):
          --profile-registers N     authenticated REGISTERs counted (default 1000)
          --profile-calls N         calls through the proxy counted (default 300)
          --profile-posts N         POST /api/v1/push/register counted (default 1000)
          --profile-notes FILE      notes copied into the report (default bench/profiling.md)
          --profile-before N        instructions per REGISTER before this work, for the
                                    before/after (default 687273, issue 21's baseline)
          --profile-before-invite N instructions per call setup before (default: e145fc6's)
          --profile-before-post N   instructions per posted token before (default: e145fc6's)
        """

    /// Reads the arguments (without the program name); the error is a message for the user.
    static func parse(_ arguments: [String]) throws(UsageError) -> BenchOptions {
        var options = BenchOptions()
        var index = 0
        func value(_ flag: String) throws(UsageError) -> String {
            index += 1
            guard index < arguments.count else { throw UsageError(message: "\(flag) needs a value") }
            return arguments[index]
        }
        func number(_ flag: String, _ range: ClosedRange<Int>) throws(UsageError) -> Int {
            guard let count = Int(try value(flag)), range.contains(count) else {
                throw UsageError(message: "\(flag) needs a whole number between \(range.lowerBound) and \(range.upperBound)")
            }
            return count
        }
        func rates(_ flag: String) throws(UsageError) -> [Double] {
            let text = try value(flag)
            let values = text.split(separator: ",").compactMap { Double($0) }
            guard !values.isEmpty, values.count == text.split(separator: ",").count, values.allSatisfy({ $0 >= 1 && $0 <= 100_000 }) else {
                throw UsageError(message: "\(flag) takes a comma list of rates per second between 1 and 100000")
            }
            return values
        }
        while index < arguments.count {
            let flag = arguments[index]
            switch flag {
            case "--seconds":
                guard let seconds = Double(try value(flag)), seconds > 0, seconds <= 3_600 else {
                    throw UsageError(message: "--seconds needs a number of seconds between 0 and 3600")
                }
                options.seconds = seconds
            case "--json":
                options.jsonPath = try value(flag)
            case "--window":
                guard let size = Int(try value(flag)), size > 0, size <= 100_000 else {
                    throw UsageError(message: "--window needs a whole number between 1 and 100000")
                }
                options.pacing = .window(size)
            case "--rate":
                guard let rate = Double(try value(flag)), rate > 0, rate <= 10_000_000 else {
                    throw UsageError(message: "--rate needs a number of requests per second")
                }
                options.pacing = .rate(perSecond: rate, maxInFlight: 10_000)
            case "--phases":
                let names = Set(try value(flag).split(separator: ",").map { String($0) })
                guard !names.isEmpty, names.isSubset(of: phaseNames) else {
                    throw UsageError(message: "--phases takes a comma list of " + phaseNames.sorted().joined(separator: ", "))
                }
                options.phases = names
            case "--database-url":
                options.databaseURL = try value(flag)
            case "--rouse":
                options.rouseExecutable = try value(flag)
            case "--register-extensions":
                guard let count = Int(try value(flag)), count > 0, count <= 1_000_000 else {
                    throw UsageError(message: "--register-extensions needs a whole number between 1 and 1000000")
                }
                options.registerExtensions = count
            case "--register-seconds":
                guard let seconds = Double(try value(flag)), seconds > 0, seconds <= 3_600 else {
                    throw UsageError(message: "--register-seconds needs a number of seconds between 0 and 3600")
                }
                options.registerSeconds = seconds
            case "--register-window":
                guard let size = Int(try value(flag)), size > 0, size <= 10_000 else {
                    throw UsageError(message: "--register-window needs a whole number between 1 and 10000")
                }
                options.registerWindow = size
            case "--memory-bindings":
                guard let count = Int(try value(flag)), count >= 0, count <= 1_000_000 else {
                    throw UsageError(message: "--memory-bindings needs a whole number between 0 and 1000000")
                }
                options.memoryBindings = count
            case "--posting-extensions":
                guard let count = Int(try value(flag)), count > 0, count <= 1_000_000 else {
                    throw UsageError(message: "--posting-extensions needs a whole number between 1 and 1000000")
                }
                options.postingExtensions = count
            case "--posting-seconds":
                guard let seconds = Double(try value(flag)), seconds > 0, seconds <= 3_600 else {
                    throw UsageError(message: "--posting-seconds needs a number of seconds between 0 and 3600")
                }
                options.postingSeconds = seconds
            case "--posting-connections":
                guard let count = Int(try value(flag)), count > 0, count <= 1_000 else {
                    throw UsageError(message: "--posting-connections needs a whole number between 1 and 1000")
                }
                options.postingConnections = count
            case "--push-count":
                guard let count = Int(try value(flag)), count > 0, count <= 80_000 else {
                    throw UsageError(message: "--push-count needs a whole number between 1 and 80000")
                }
                options.pushCount = count
            case "--push-window":
                guard let size = Int(try value(flag)), size > 0, size <= 300 else {
                    throw UsageError(message: "--push-window needs a whole number between 1 and 300")
                }
                options.pushWindow = size
            case "--calls-callees":
                guard let count = Int(try value(flag)), count > 0, count <= 100_000 else {
                    throw UsageError(message: "--calls-callees needs a whole number between 1 and 100000")
                }
                options.callsCallees = count
            case "--calls-window":
                guard let size = Int(try value(flag)), size > 0, size <= 10_000 else {
                    throw UsageError(message: "--calls-window needs a whole number between 1 and 10000")
                }
                options.callsWindow = size
            case "--calls-count":
                guard let count = Int(try value(flag)), count > 0, count <= 1_000_000 else {
                    throw UsageError(message: "--calls-count needs a whole number between 1 and 1000000")
                }
                options.callsCount = count
            case "--calls-seconds":
                guard let seconds = Double(try value(flag)), seconds > 0, seconds <= 3_600 else {
                    throw UsageError(message: "--calls-seconds needs a number of seconds between 0 and 3600")
                }
                options.callsSeconds = seconds
            case "--calls-push-samples":
                guard let count = Int(try value(flag)), count > 0, count <= 100_000 else {
                    throw UsageError(message: "--calls-push-samples needs a whole number between 1 and 100000")
                }
                options.callsPushSamples = count
            case "--calls-wake-samples":
                guard let count = Int(try value(flag)), count > 0, count <= 10_000 else {
                    throw UsageError(message: "--calls-wake-samples needs a whole number between 1 and 10000")
                }
                options.callsWakeSamples = count
            case "--report-dir":
                options.reportDirectory = try value(flag)
            case "--quick":
                options.registerExtensions = 2_000
                options.memoryBindings = 10_000
                options.registerSeconds = 3
                options.registerRounds = 2
                options.registerFillSeconds = 20
                options.callsSeconds = 3
                options.callsPushSamples = 50
                options.callsWakeSamples = 30
                options.postingSeconds = 2
                options.pushCount = 1_000
                options.profileRegisters = 500
                options.profileCalls = 100
                options.profilePosts = 300
                options.sippRegisterRates = [1_000, 3_000]
                options.sippCallRates = [100, 300]
                options.sippSeconds = 3
                options.sippPhones = 2_000
                options.sippCallees = 200
                options.scaleBindings = 100_000
                options.scalePhones = 2_000
                options.scaleRate = 500
                options.scaleSeconds = 3
            case "--memory-database-url":
                options.memoryDatabaseURL = try value(flag)
            case "--kamailio":
                options.kamailioExecutable = try value(flag)
            case "--kamailio-config":
                options.kamailioConfig = try value(flag)
            case "--kamailio-database-url":
                options.kamailioDatabaseURL = try value(flag)
            case "--kamailio-children":
                options.kamailioChildren = try number(flag, 1...64)
            case "--register-rounds":
                options.registerRounds = try number(flag, 1...20)
            case "--register-fill-seconds":
                options.registerFillSeconds = Double(try number(flag, 1...3_600))
            case "--register-rate":
                guard let rate = Double(try value(flag)), rate > 0, rate <= 1_000_000 else {
                    throw UsageError(message: "--register-rate needs a number of REGISTERs per second")
                }
                options.registerRate = rate
            case "--register-modes":
                let names = try value(flag).split(separator: ",").map(String.init)
                let modes = names.compactMap(RegisterComparison.Mode.init(rawValue:))
                guard !modes.isEmpty, modes.count == names.count else {
                    throw UsageError(message: "--register-modes takes a comma list of durable, memory")
                }
                options.registerModes = modes
            case "--register-transports":
                let names = try value(flag).split(separator: ",").map(String.init)
                let transports = names.compactMap(RegisterLoadGenerator.Transport.init(rawValue:))
                guard !transports.isEmpty, transports.count == names.count else {
                    throw UsageError(message: "--register-transports takes a comma list of udp, tcp")
                }
                options.registerTransports = transports
            case "--tcp-connections":
                options.tcpConnections = try number(flag, 1...10_000)
            case "--profile-notes":
                options.profileNotes = try value(flag)
            case "--profile-registers":
                options.profileRegisters = try number(flag, 100...100_000)
            case "--sipp":
                options.sippExecutable = try value(flag)
            case "--sipp-register-rates":
                options.sippRegisterRates = try rates(flag)
            case "--sipp-call-rates":
                options.sippCallRates = try rates(flag)
            case "--sipp-seconds":
                options.sippSeconds = Double(try number(flag, 1...600))
            case "--sipp-phones":
                options.sippPhones = try number(flag, 1...1_000_000)
            case "--sipp-callees":
                options.sippCallees = try number(flag, 1...100_000)
            case "--scale-database-url":
                options.scaleDatabaseURL = try value(flag)
            case "--scale-bindings":
                options.scaleBindings = try number(flag, 1...5_000_000)
            case "--scale-rate":
                options.scaleRate = Double(try number(flag, 1...100_000))
            case "--scale-phones":
                options.scalePhones = try number(flag, 1...1_000_000)
            case "--scale-seconds":
                options.scaleSeconds = Double(try number(flag, 1...600))
            case "--profile-before", "--profile-before-invite", "--profile-before-post":
                let before = Double(try number(flag, 1...100_000_000))
                if flag == "--profile-before" {
                    options.profileBefore = before
                } else if flag == "--profile-before-invite" {
                    options.profileBeforeInvite = before
                } else {
                    options.profileBeforePost = before
                }
            case "--profile-calls":
                options.profileCalls = try number(flag, 10...100_000)
            case "--profile-posts":
                options.profilePosts = try number(flag, 10...100_000)
            case "--sip-threads":
                options.sipThreads = try number(flag, 1...256)
            case "--help", "-h":
                throw UsageError(message: nil)
            default:
                throw UsageError(message: "unknown option '\(flag)'")
            }
            index += 1
        }
        return options
    }
}

/// A command line `rouse-bench` cannot follow; a nil message asks for the usage text alone.
struct UsageError: Error {
    var message: String?
}
