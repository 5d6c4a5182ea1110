use super::*;

#[test]
fn a_message_is_its_header_and_body() {
    let message = encode(RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK, 7, &[1, 2, 3, 4]);
    assert_eq!(message.len(), 20);
    assert_eq!(u32::from_ne_bytes(message[0..4].try_into().unwrap()), 20);
    assert_eq!(u16::from_ne_bytes([message[4], message[5]]), RTM_NEWROUTE);
    assert_eq!(u16::from_ne_bytes([message[6], message[7]]), 5);
    assert_eq!(u32::from_ne_bytes(message[8..12].try_into().unwrap()), 7);
    assert_eq!(&message[16..], &[1, 2, 3, 4]);
}

#[test]
fn attributes_are_padded_to_four_bytes() {
    let mut out = Vec::new();
    attribute(&mut out, RTA_DST, &[10, 0, 0]);
    assert_eq!(out, vec![7, 0, 1, 0, 10, 0, 0, 0]);
    attribute(&mut out, RTA_OIF, &1u32.to_ne_bytes());
    assert_eq!(out.len(), 16);
}

fn error_answer(code: i32) -> Vec<u8> {
    let mut answer = encode(NLMSG_ERROR, 0, 1, &code.to_ne_bytes());
    answer.extend_from_slice(&[0; 16]);
    answer
}

#[test]
fn the_kernels_answer_is_done_or_an_errno() {
    assert!(acknowledgement(&error_answer(0)).is_ok());
    let refused = acknowledgement(&error_answer(-libc::EEXIST)).unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc::EEXIST));
    assert!(acknowledgement(&[0; 8]).is_err());
    assert!(acknowledgement(&encode(RTM_NEWLINK, 0, 1, &[0; 4])).is_err());
}
