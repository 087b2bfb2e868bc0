import Foundation

/// A throw-away certificate authority for TLS client-certificate tests, made with the `openssl`
/// command-line tool: a P-256 CA valid for 2 days that issues client certificates
/// (`extendedKeyUsage=clientAuth`). Files are PEM, in a `TemporaryFolder` of its own, removed by
/// `remove()` or when the last copy of this value goes; each certificate it issues is a
/// `TestCertificate` in a folder of its own, which outlives the CA if kept.
/// Blocks while `openssl` runs; thread-safe (each instance works in its own folder).
public struct TestCertificateAuthority: Sendable {
    /// Why a certificate could not be made.
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public let certificatePath: String
    public let keyPath: String
    /// The folder of the CA's certificate and key.
    public let folder: TemporaryFolder

    /// A new CA named `commonName`.
    public init(commonName: String = "Rouse test client CA") throws {
        folder = try TemporaryFolder(prefix: "rouse-ca")
        certificatePath = folder.file("ca.pem")
        keyPath = folder.file("ca-key.pem")
        try Self.openssl([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-subj", "/CN=\(commonName)", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-keyout", keyPath, "-out", certificatePath,
        ])
    }

    /// Deletes the CA's files (the folder); certificates it issued stay until they are removed.
    public func remove() { folder.remove() }

    /// A client certificate for `commonName`, signed by this CA, in a folder of its own.
    public func issueClientCertificate(commonName: String) throws -> TestCertificate {
        let issued = try TemporaryFolder(prefix: "rouse-client-cert")
        let key = issued.file("key.pem")
        let request = issued.file("request.csr")
        let certificate = issued.file("certificate.pem")
        let extensions = issued.file("extensions.ext")
        try "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"
            .write(toFile: extensions, atomically: true, encoding: .utf8)
        try Self.openssl([
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=\(commonName)",
            "-keyout", key, "-out", request,
        ])
        try Self.openssl([
            "x509", "-req", "-in", request, "-CA", certificatePath, "-CAkey", keyPath, "-set_serial", String(UInt32.random(in: 1...UInt32.max)),
            "-days", "2", "-extfile", extensions, "-out", certificate,
        ])
        return TestCertificate(certificatePath: certificate, keyPath: key, folder: issued)
    }

    private static func openssl(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["openssl"] + arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let message = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw Failure(description: "openssl \(arguments.first ?? "") failed (\(process.terminationStatus)): \(String(decoding: message, as: UTF8.self))")
        }
    }
}
