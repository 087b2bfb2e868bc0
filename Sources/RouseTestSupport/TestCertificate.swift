import Foundation

/// Makes throw-away self-signed certificates for TLS tests with the `openssl` command-line tool.
/// Thread-safe: every call works in a directory of its own.
public enum TestCertificate {
    /// Why a certificate could not be made.
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// A P-256 key and a self-signed certificate valid for 2 days, naming `commonName` and (as
    /// subject alternative names) `commonName`, 127.0.0.1 and ::1. Written as PEM files in a new
    /// temporary directory. Blocks while `openssl` runs.
    public static func make(commonName: String = "rouse.test") throws -> (certificatePath: String, keyPath: String) {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("rouse-cert-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let certificatePath = directory.appendingPathComponent("certificate.pem").path
        let keyPath = directory.appendingPathComponent("key.pem").path
        try run([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-subj", "/CN=\(commonName)", "-addext", "subjectAltName=DNS:\(commonName),IP:127.0.0.1,IP:::1",
            "-keyout", keyPath, "-out", certificatePath,
        ])
        return (certificatePath, keyPath)
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
