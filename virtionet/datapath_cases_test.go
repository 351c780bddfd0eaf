package virtionet

import "testing"

// datapathCases run under every frame-I/O mechanism (TestDatapath): the
// virtqueue-side logic is one, whatever moves the frames.
var datapathCases = []struct {
	name string
	test func(t *testing.T, io IOMode)
}{
	{"TxFramesReachBackend", testTxFramesReachBackend},
	{"TxIndirectChains", testTxIndirectChains},
	{"TxDrops", testTxDropsShortFramesAndWritableBuffers},
	{"TxChainLongerThanIovMax", testTxChainLongerThanIovMax},
	{"TxPacketBudget", testTxPacketBudgetStopsRunAtExactlyN},
	{"TxByteBudget", testTxByteBudgetStopsRunAtExactlyB},
	{"TxUnlimitedWeight", testTxUnlimitedWeightIsOneRun},
	{"TxNotifyThreshold", testTxNotifyThresholdPublishesEveryN},
	{"TxBudgetRequeuesBehindRx", testTxBudgetRequeuesBehindRx},
	{"InterruptSuppression", testInterruptSuppressionEventIdx},
	{"KickSuppression", testKickSuppressionAvailEvent},
	{"TxPollModeKeepsKicksOff", testTxPollModeKeepsKicksOff},
	{"LoneFrameKeepsKicks", testLoneFrameKeepsKicks},
	{"KicksAreNotRead", testKicksAreNotRead},
	{"LoneRxPollTakesTheReply", testLoneRxPollTakesTheReplyWithoutAKick},
	{"RxIrqGapCoalesces", testRxIrqGapCoalesces},
	{"HostileTxChain", testHostileTxChainFailsOnlyTx},
	{"ResetReactivates", testResetStopsWorkerAndReactivates},
	{"HandlersStop", testHandlersStopWhenResetBegins},
	{"Stats", testStatsJSONAndText},
	{"RxFrameIntoGuestBuffer", testRxFrameIntoGuestBuffer},
	{"RxMergeableBuffers", testRxMergeableBuffers},
	{"RxWithoutMergeable", testRxWithoutMergeableUsesOneChainPerFrame},
	{"RxDropsTooLarge", testRxDropsFrameLargerThanBuffers},
	{"RxTruncatedFrameDropped", testRxBatchTruncatedFrameIsDropped},
	{"RxWaitsForBuffers", testRxWaitsForBuffers},
	{"RxPollModeKeepsKicksOff", testRxPollModeKeepsKicksOff},
	{"RxLoneFramePopsFewChains", testRxLoneFramePopsFewChains},
	{"RxLoneTurnReadsOnce", testRxLoneTurnReadsOnce},
	{"RxFrameRightAfterUnprobedRun", testRxFrameRightAfterUnprobedRunEndsLoneFrames},
	{"RxPacketBudgetRequeues", testRxPacketBudgetRequeues},
	{"RxBatchPublishesOnce", testRxBatchPublishesOnceAndSignalsOnce},
	{"RxBatchOneIsPerFrame", testRxBatchOneIsPerFrame},
	{"HostileRxChains", testHostileRxChains},
	{"RxBackendEOF", testRxBackendEOFDoesNotSpin},
	{"RxSmallRingNeverStalls", testRxSmallRingNeverStalls},
	{"RxHeldFrameWaitsForOneMoreKick", testRxHeldFrameWaitsForOneMoreKick},
	{"RxMergeableChainsFollowFrameSize", testRxMergeableChainsFollowFrameSize},
	{"RxFrameLargerThanMTUIsDropped", testRxFrameLargerThanMTUIsDropped},
	{"RxFrameOverMaxInLargeBuffersIsDropped", testRxFrameOverMaxInLargeBuffersIsDropped},
	{"RxFrameOverMaxIsNotHeld", testRxFrameOverMaxIsNotHeld},
	{"RxHeldFrameDroppedWhenBuffersCannotGrow", testRxHeldFrameDroppedWhenBuffersCannotGrow},
	{"TxLongChainWithWritableTailIsDropped", testTxLongChainWithWritableTailIsDropped},
	{"TxFrameRateLimit", testTxFrameRateLimit},
	{"TxByteRateLimit", testTxByteRateLimit},
	{"RxThrottledDoesNotReadBackend", testRxThrottledDoesNotReadBackend},
	{"ThrottledReset", testThrottledReset},
	{"CaptureBothDirections", testCaptureBothDirections},
}

// TestDatapath runs every datapath case with one writev or readv per
// frame, with sendmmsg and recvmmsg, and with io_uring.
func TestDatapath(t *testing.T) {
	for _, io := range rigIOs {
		t.Run(string(io), func(t *testing.T) {
			skipUnlessIO(t, io)
			for _, c := range datapathCases {
				t.Run(c.name, func(t *testing.T) { c.test(t, io) })
			}
		})
	}
}
