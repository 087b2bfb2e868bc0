import Foundation
import RouseTestSupport
import XCTest

/// The test files `RouseTestSupport` makes go away with their owner: a `TemporaryFolder` with
/// `remove()` or its last reference, a push stand-in's state folder once it is stopped, and also
/// when it could not start (a test whose `setUp` throws leaves nothing behind).
final class TemporaryFilesTests: XCTestCase {
    /// The names in the temporary directory starting with `prefix`.
    func entries(_ prefix: String) throws -> Set<String> {
        Set(try FileManager.default.contentsOfDirectory(atPath: TemporaryFolder.temporaryDirectory).filter { $0.hasPrefix(prefix) })
    }

    func testAFolderGoesWithItsContentsOnRemoveAndWithItsLastReference() throws {
        let folder = try TemporaryFolder(prefix: "rouse-cleanup-test")
        try FileManager.default.createDirectory(atPath: folder.file("inner"), withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: folder.file("inner/file")))
        XCTAssertTrue(folder.path.hasPrefix(TemporaryFolder.temporaryDirectory + "/rouse-cleanup-test."), folder.path)
        folder.remove()
        XCTAssertFalse(FileManager.default.fileExists(atPath: folder.path))
        folder.remove()  // idempotent

        var held: TemporaryFolder? = try TemporaryFolder(prefix: "rouse-cleanup-test")
        let path = try XCTUnwrap(held?.path)
        XCTAssertTrue(FileManager.default.fileExists(atPath: path))
        held = nil
        XCTAssertFalse(FileManager.default.fileExists(atPath: path), "the last reference took the folder with it")
    }

    func testACertificateAndAKeyGoWithTheirLastCopy() throws {
        var certificate: TestCertificate? = try TestCertificate.make()
        let paths = [certificate?.certificatePath, certificate?.keyPath].compactMap { $0 }
        XCTAssertEqual(paths.filter { FileManager.default.fileExists(atPath: $0) }.count, 2)
        certificate = nil
        XCTAssertEqual(paths.filter { FileManager.default.fileExists(atPath: $0) }, [])

        let key = try PushStandIn.makeAPNsKey()
        XCTAssertTrue(FileManager.default.fileExists(atPath: key.keyPath))
        key.remove()
        XCTAssertFalse(FileManager.default.fileExists(atPath: key.keyPath))
    }

    func testAStoppedStandInAndOneThatCouldNotStartLeaveNoFolder() throws {
        let before = try entries("rouse-standin-webpush.")
        let standIn = try PushStandIn.webPush()
        XCTAssertTrue(FileManager.default.fileExists(atPath: standIn.stateDirectory + "/ca.pem"))
        standIn.stop()
        XCTAssertFalse(FileManager.default.fileExists(atPath: standIn.stateDirectory))

        XCTAssertThrowsError(try PushStandIn.webPush(arguments: ["--no-such-flag"])) { error in
            XCTAssertTrue("\(error)".contains("exited before it was ready"), "\(error)")
        }
        XCTAssertEqual(try entries("rouse-standin-webpush."), before)
    }
}
