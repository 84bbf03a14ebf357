import PatchSyncCLI

await PatchSyncCommand.runMain()
