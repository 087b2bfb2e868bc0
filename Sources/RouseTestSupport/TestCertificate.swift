import Foundation

/// A throw-away self-signed certificate for TLS tests, made with the `openssl` command-line tool:
/// its PEM files live in a `TemporaryFolder` of their own, removed by `remove()` or when the last
/// copy of this value goes. Thread-safe: every `make` works in a folder of its own.
public struct TestCertificate: Sendable {
    public let certificatePath: String
    public let keyPath: String
    /// The folder holding both files.
    public let folder: TemporaryFolder

    /// Deletes both files (the folder).
    public func remove() { folder.remove() }

    /// Why a certificate could not be made.
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// A P-256 key and a self-signed certificate valid for 2 days, naming `commonName` and (as
    /// subject alternative names) `commonName`, 127.0.0.1 and ::1. Written as PEM files in a new
    /// temporary folder (removed again when `openssl` fails). Blocks while `openssl` runs.
    public static func make(commonName: String = "rouse.test") throws -> TestCertificate {
        let folder = try TemporaryFolder(prefix: "rouse-cert")
        let certificatePath = folder.file("certificate.pem")
        let keyPath = folder.file("key.pem")
        try run([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-subj", "/CN=\(commonName)", "-addext", "subjectAltName=DNS:\(commonName),IP:127.0.0.1,IP:::1",
            "-keyout", keyPath, "-out", certificatePath,
        ])
        return TestCertificate(certificatePath: certificatePath, keyPath: keyPath, folder: folder)
    }

    private static func run(_ arguments: [String]) throws {
        guard let executable = openSSLPath() else {
            throw Failure(description: "the openssl command is not installed (apt-get install openssl)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let message = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw Failure(description: "openssl failed (\(process.terminationStatus)): \(String(decoding: message, as: UTF8.self))")
        }
    }

    private static func openSSLPath() -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") + ["/usr/bin", "/usr/local/bin"] {
            let candidate = "\(directory)/openssl"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}
